"""`python -m chaosbench.proxy`: a Toxiproxy-compatible fault proxy server.

    python -m chaosbench.proxy --host 0.0.0.0 --port 8474 [--config proxies.json]

The config file is the JSON list that POST /populate takes; its proxies exist before the API
answers. Logs go to stderr. SIGTERM / SIGINT close every proxy and connection, then exit 0.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

from .api import ApiError
from .server import ProxyServer


def _load_config(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise SystemExit(f"error: cannot read --config {path}: {exc.strerror}")
    except ValueError as exc:
        raise SystemExit(f"error: --config {path} is not valid JSON: {exc}")
    if not isinstance(data, list):
        raise SystemExit(f"error: --config {path} must be a JSON list of proxies "
                         '[{"name": ..., "listen": "host:port", "upstream": "host:port"}]')
    return data


async def _main(args: argparse.Namespace, config: list[dict] | None) -> int:
    server = ProxyServer(args.host, args.port)
    try:
        await server.start(config)
    except Exception as exc:
        where = f"--config {args.config}: " if args.config and isinstance(exc, ApiError) else ""
        logging.getLogger("chaosbench.proxy").error("cannot start: %s%s", where, exc)
        await server.shutdown()
        return 1
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: (
            logging.getLogger("chaosbench.proxy").info("%s: shutting down", s.name),
            loop.create_task(server.shutdown())))
    await server.wait_stopped()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaosbench.proxy", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="API bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8474, help="API port (default 8474)")
    parser.add_argument("--config", help="JSON list of proxies to create at start (as POST /populate)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = _load_config(args.config) if args.config else None
    return asyncio.run(_main(args, config))


if __name__ == "__main__":
    sys.exit(main())
