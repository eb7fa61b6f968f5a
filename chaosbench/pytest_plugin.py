"""pytest plugin: registers the `chaos` marker (scenario collection is added by the scenario engine)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "chaos: end-to-end chaos scenarios on a real cluster")
