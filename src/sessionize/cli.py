"""Command line (placeholder until the commands land)."""


def main() -> None:
    raise SystemExit("sessionize: no commands yet")
