"""CQL text → tokens → AST.  See ``parser.parse_script`` and ``parser.parse_query``."""

from sluice.cql.errors import BindError, CQLError, ParseError, Span
from sluice.cql.parser import parse_expression, parse_query, parse_script, parse_statement

__all__ = [
    "BindError",
    "CQLError",
    "ParseError",
    "Span",
    "parse_expression",
    "parse_query",
    "parse_script",
    "parse_statement",
]
