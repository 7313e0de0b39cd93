"""NEXMark events, generated as Apache Beam's NEXMark generator does (event by event, seeded).

Event n is a Person if ``n mod 50 == 0``, an Auction if 1–3, else a Bid; person and auction ids
derive from the event number (offset 1000); timestamps are ``base + n·(10⁶/rate) µs``; hot
auctions (ratio 2), hot sellers and bidders (ratio 4); 100 auctions in flight and 1,000 active
people; price ``round(10^(6·U)·100)``.  Each event draws from ``java.util.Random(n)``,
reimplemented bit for bit, in Beam's order, so the streams are deterministic and match Beam's.

>>> g = NexmarkGenerator(rate=1000)
>>> [type(e).__name__ for e in g.events(5)]
['Person', 'Auction', 'Auction', 'Auction', 'Bid']
>>> p = next(iter(NexmarkGenerator().events(1))); p.id, p.state in US_STATES
(1000, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_ID_LEAD = AUCTION_ID_LEAD = 10
HOT_SELLER_RATIO = HOT_AUCTION_RATIO = HOT_BIDDER_RATIO = 100
US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]

_MASK = (1 << 48) - 1


class JavaRandom:
    """``java.util.Random``: the 48-bit linear congruential generator, exactly."""

    def __init__(self, seed: int) -> None:
        self.seed = (seed ^ 0x5DEECE66D) & _MASK

    def _next(self, bits: int) -> int:
        self.seed = (self.seed * 0x5DEECE66D + 0xB) & _MASK
        v = self.seed >> (48 - bits)
        return v - (1 << bits) if v >= 1 << (bits - 1) else v  # as a signed Java int

    def next_int(self, bound: int | None = None) -> int:
        if bound is None:
            return self._next(32)
        if bound & (bound - 1) == 0:
            return (bound * (self._next(31) & 0x7FFFFFFF)) >> 31
        while True:
            bits = self._next(31) & 0x7FFFFFFF
            val = bits % bound
            if bits - val + (bound - 1) < (1 << 31):
                return val

    def next_long(self) -> int:
        v = ((self._next(32) << 32) + self._next(32)) & ((1 << 64) - 1)
        return v - (1 << 64) if v >= 1 << 63 else v

    def next_double(self) -> float:
        return (((self._next(26) & 0x3FFFFFF) << 27) + (self._next(27) & 0x7FFFFFF)) * (1.0 / (1 << 53))


def _next_long(r: JavaRandom, n: int) -> int:
    if n < 2**31 - 1:
        return r.next_int(n)
    return abs(r.next_long() % n)  # Java's % keeps the dividend's sign; abs as Beam does


def _java_round(x: float) -> int:
    import math

    return math.floor(x + 0.5)


def _next_price(r: JavaRandom) -> int:
    return _java_round(10.0 ** (r.next_double() * 6.0) * 100.0)


def _next_string(r: JavaRandom, max_length: int) -> str:
    n = 3 + r.next_int(max_length - 3)
    out = []
    for _ in range(n):
        out.append(" " if r.next_int(13) == 0 else chr(ord("a") + r.next_int(26)))
    return "".join(out).strip()


def _next_exact_string(r: JavaRandom, length: int) -> str:
    out, rnd, n = [], 0, 0
    for _ in range(length):
        if n == 0:
            rnd, n = r.next_int(), 6
        out.append(chr(ord("a") + (rnd - 26 * int(rnd / 26))))  # Java's % keeps the dividend's sign
        rnd = int(rnd / 26)  # and its integer division truncates
        n -= 1
    return "".join(out)


def _next_extra(r: JavaRandom, current: int, average: int) -> str:
    if current > average:
        return ""
    average -= current
    delta = _java_round(average * 0.2)
    size = average - delta + (0 if delta == 0 else r.next_int(2 * delta))
    return _next_exact_string(r, size)


@dataclass(frozen=True, slots=True)
class Person:
    id: int
    name: str
    email: str
    credit_card: str
    city: str
    state: str
    date_time: int
    extra: str


@dataclass(frozen=True, slots=True)
class Auction:
    id: int
    item_name: str
    description: str
    initial_bid: int
    reserve: int
    date_time: int
    expires: int
    seller: int
    category: int
    extra: str


@dataclass(frozen=True, slots=True)
class Bid:
    auction: int
    bidder: int
    price: int
    date_time: int
    extra: str


Event = Person | Auction | Bid


def last_base0_person_id(event_id: int) -> int:
    epoch, offset = divmod(event_id, DENOMINATOR)
    if offset >= PERSON_PROPORTION:
        offset = PERSON_PROPORTION - 1
    return epoch * PERSON_PROPORTION + offset


def last_base0_auction_id(event_id: int) -> int:
    epoch, offset = divmod(event_id, DENOMINATOR)
    if offset < PERSON_PROPORTION:
        epoch -= 1
        offset = AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


class NexmarkGenerator:
    """Deterministic NEXMark events at ``rate`` events per second of event time (ms timestamps)."""

    def __init__(
        self,
        rate: int = 10_000,
        base_time: int = 0,
        in_flight_auctions: int = 100,
        active_people: int = 1000,
        hot_auction_ratio: int = 2,
        hot_sellers_ratio: int = 4,
        hot_bidders_ratio: int = 4,
        avg_person_bytes: int = 200,
        avg_auction_bytes: int = 500,
        avg_bid_bytes: int = 100,
        extras: bool = True,
    ) -> None:
        """``extras=False`` leaves each event's ``extra`` padding empty: it is the last draw from the
        event's own ``Random(n)``, so every other field is unchanged — and making it is ~75% of the
        generator's time. Everything that drops it (``as_rows``) asks for none.
        """
        self.extras = extras
        self.inter_event_us = 1_000_000 // rate
        self.base_time = base_time
        self.in_flight_auctions, self.active_people = in_flight_auctions, active_people
        self.hot_auction_ratio, self.hot_sellers_ratio = hot_auction_ratio, hot_sellers_ratio
        self.hot_bidders_ratio = hot_bidders_ratio
        self.avg_person, self.avg_auction, self.avg_bid = avg_person_bytes, avg_auction_bytes, avg_bid_bytes

    def _extra(self, r: JavaRandom, current: int, average: int) -> str:
        return _next_extra(r, current, average) if self.extras else ""

    def timestamp(self, n: int) -> int:
        return self.base_time + (n * self.inter_event_us) // 1000

    def _next_base0_person(self, event_id: int, r: JavaRandom) -> int:
        people = last_base0_person_id(event_id) + 1
        active = min(people, self.active_people)
        return people - active + _next_long(r, active + PERSON_ID_LEAD)

    def _next_base0_auction(self, event_id: int, r: JavaRandom) -> int:
        hi = last_base0_auction_id(event_id)
        lo = max(hi - self.in_flight_auctions, 0)
        return lo + _next_long(r, hi - lo + 1 + AUCTION_ID_LEAD)

    def event(self, n: int) -> Event:
        r = JavaRandom(n)
        ts = self.timestamp(n)
        rem = n % DENOMINATOR
        if rem < PERSON_PROPORTION:
            pid = last_base0_person_id(n) + FIRST_PERSON_ID
            name = f"{FIRST_NAMES[r.next_int(len(FIRST_NAMES))]} {LAST_NAMES[r.next_int(len(LAST_NAMES))]}"
            email = _next_string(r, 7) + "@" + _next_string(r, 5) + ".com"
            card = " ".join(f"{r.next_int(10000):04d}" for _ in range(4))
            city = US_CITIES[r.next_int(len(US_CITIES))]
            state = US_STATES[r.next_int(len(US_STATES))]
            size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
            return Person(pid, name, email, card, city, state, ts, self._extra(r, size, self.avg_person))
        if rem < PERSON_PROPORTION + AUCTION_PROPORTION:
            aid = last_base0_auction_id(n) + FIRST_AUCTION_ID
            if r.next_int(self.hot_sellers_ratio) > 0:
                seller = (last_base0_person_id(n) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
            else:
                seller = self._next_base0_person(n, r)
            seller += FIRST_PERSON_ID
            category = FIRST_CATEGORY_ID + r.next_int(NUM_CATEGORIES)
            initial = _next_price(r)
            ahead = self.in_flight_auctions * DENOMINATOR // AUCTION_PROPORTION
            horizon = self.timestamp(n + ahead) - ts
            expires = ts + 1 + _next_long(r, max(horizon * 2, 1))
            name = _next_string(r, 20)
            desc = _next_string(r, 100)
            reserve = initial + _next_price(r)
            size = 8 + len(name) + len(desc) + 8 + 8 + 8 + 8 + 8
            return Auction(
                aid, name, desc, initial, reserve, ts, expires, seller, category, self._extra(r, size, self.avg_auction)
            )
        if r.next_int(self.hot_auction_ratio) > 0:
            auction = (last_base0_auction_id(n) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        else:
            auction = self._next_base0_auction(n, r)
        auction += FIRST_AUCTION_ID
        if r.next_int(self.hot_bidders_ratio) > 0:
            bidder = (last_base0_person_id(n) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        else:
            bidder = self._next_base0_person(n, r)
        bidder += FIRST_PERSON_ID
        price = _next_price(r)
        return Bid(auction, bidder, price, ts, self._extra(r, 32, self.avg_bid))

    def events(self, count: int, first: int = 0) -> Iterator[Event]:
        for n in range(first, first + count):
            yield self.event(n)


DDL = """
REGISTER STREAM Person (id bigint, name varchar(32), emailAddress varchar(32), creditCard varchar(19),
                        city varchar(16), state varchar(2), dateTime timestamp);
REGISTER STREAM Auction (id bigint, itemName varchar(24), description varchar(104), initialBid bigint,
                         reserve bigint, dateTime timestamp, expires timestamp, seller bigint, category bigint);
REGISTER STREAM Bid (auction bigint, bidder bigint, price bigint, dateTime timestamp);
REGISTER RELATION Category (id bigint, name varchar(16));
"""


def as_rows(events: Iterator[Event]) -> dict[str, list[tuple[object, ...]]]:
    """Events as ``(ts, values…)`` rows per stream (the DDL above; extras dropped)."""
    out: dict[str, list[tuple[object, ...]]] = {"Person": [], "Auction": [], "Bid": []}
    for e in events:
        if isinstance(e, Person):
            out["Person"].append((e.date_time, e.id, e.name, e.email, e.credit_card, e.city, e.state, e.date_time))
        elif isinstance(e, Auction):
            out["Auction"].append(
                (
                    e.date_time,
                    e.id,
                    e.item_name,
                    e.description,
                    e.initial_bid,
                    e.reserve,
                    e.date_time,
                    e.expires,
                    e.seller,
                    e.category,
                )
            )
        else:
            out["Bid"].append((e.date_time, e.auction, e.bidder, e.price, e.date_time))
    return out


def categories() -> list[tuple[object, ...]]:
    return [(0, "+", FIRST_CATEGORY_ID + i, f"category{i}") for i in range(NUM_CATEGORIES)]


COLUMNS = {
    "Person": ["id", "name", "emailAddress", "creditCard", "city", "state", "dateTime"],
    "Auction": ["id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires", "seller", "category"],
    "Bid": ["auction", "bidder", "price", "dateTime"],
    "Category": ["id", "name"],
}


def write(
    out: str, events: int, rate: int = 10_000, first: int = 0, wrap: Callable[[Iterator[Event]], Any] | None = None
) -> dict[str, int]:
    """Generate ``events`` events into ``out/{Person,Auction,Bid}.parquet`` (a ``ts`` column plus
    the attributes), the ``Category`` relation (``ts, sign, id, name``) and ``schema.cql`` (the
    DDL), ready for ``sluice run out/schema.cql+queries --source Bid=out/Bid.parquet
    --source Category=out/Category.parquet``; returns row counts.  ``wrap`` wraps the event
    iterator (a progress bar).
    """
    from pathlib import Path

    import pyarrow.parquet as pq

    from sluice.workloads import to_table

    it = NexmarkGenerator(rate=rate, extras=False).events(events, first)
    rows = as_rows(wrap(it) if wrap is not None else it)
    rows["Category"] = categories()
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rs in rows.items():
        cols = ["ts", "sign", *COLUMNS[name]] if name == "Category" else ["ts", *COLUMNS[name]]
        pq.write_table(to_table(cols, rs), o / f"{name}.parquet")
        counts[name] = len(rs)
    (o / "schema.cql").write_text(DDL.strip() + "\n")
    return counts
