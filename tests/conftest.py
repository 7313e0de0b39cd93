import os
import sys

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite the expected blocks of tests/golden/*.test with the reference evaluator's output",
    )


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession every Spark test shares (start-up takes seconds)."""
    from sluice.backends.spark.session import get_session, java_available

    if not java_available():
        pytest.fail("Java 17 is required for the Spark tests; `make test` installs it (openjdk-17-jre-headless)")
    return get_session("local[2]")


@pytest.fixture(autouse=True)
def _no_streaming_query_outlives_its_test():
    """Stop the Spark streaming queries a test left running (``SparkEngine.close`` ends the input,
    ``stop`` stops them): measured, 22 of them left by the Spark tests kept the JVM at 113% of a
    core while the rest of the suite ran — the tests after them took 2.8× as long.
    """
    yield
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        for q in session.streams.active:
            q.stop()
