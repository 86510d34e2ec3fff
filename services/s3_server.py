"""moto's S3 API server, with its buckets kept across a clean stop.

moto keeps everything in memory; this launcher loads the S3 backend from DATA/s3.pickle at
start and writes it back (atomically) on SIGTERM/SIGINT, so `s3.sh stop` then `start` keeps
the objects, as every other test service does. A kill -9 of the server loses what changed
since its start. Usage: python s3_server.py HOST PORT DATA_DIR
"""

import os
import pickle
import signal
import sys

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3 import models
from werkzeug.serving import run_simple


def main() -> None:
    host, port, data = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    os.environ.setdefault("MOTO_PORT", str(port))
    snapshot = os.path.join(data, "s3.pickle")
    if os.path.exists(snapshot):
        with open(snapshot, "rb") as f:
            saved = pickle.load(f)
        for account, regions in saved.items():
            for region, backend in regions.items():
                models.s3_backends[account][region].__dict__.update(backend.__dict__)

    def save_and_exit(signum, frame):
        state = {
            a: {r: models.s3_backends[a][r] for r in regions.keys()}
            for a, regions in models.s3_backends.items()
        }
        tmp = snapshot + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f)
        os.replace(tmp, snapshot)
        os._exit(0)

    signal.signal(signal.SIGTERM, save_and_exit)
    signal.signal(signal.SIGINT, save_and_exit)
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
