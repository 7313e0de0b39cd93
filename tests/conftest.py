import os

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
