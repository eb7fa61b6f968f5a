"""`chaosbench export`: render a scenario's cluster for other platforms (Kubernetes)."""


def main(argv=None) -> int:
    from .cli import main as _main
    return _main(argv)
