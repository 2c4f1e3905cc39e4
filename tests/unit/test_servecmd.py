"""How `serve` tells, after a stop signal, whether Ray is still there to drain through: its
GCS answers (service.startfail.unreachable), unless the signal went to the whole process
group and took Ray's daemons along."""

from __future__ import annotations

import socket

from service.startfail import unreachable
from tests.net import free_port


def test_a_listening_gcs_answers_and_a_dead_one_does_not() -> None:
    with socket.socket() as gcs:
        gcs.bind(("127.0.0.1", 0))
        gcs.listen()
        assert unreachable(f"127.0.0.1:{gcs.getsockname()[1]}") is None
    assert unreachable(f"127.0.0.1:{free_port()}") is not None
