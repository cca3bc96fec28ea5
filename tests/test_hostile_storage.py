"""Issue 27: object stores that stop answering, or die in the middle of a read.

Findings: an object store that accepts connections and never answers cost 415 s per call (no
client timeouts; s3fs and botocore each retried 5 times); a store dying during ``verify --deep``
ended in an ``EndpointConnectionError`` traceback. A real S3 server (moto on 127.0.0.1) sits
behind a real TCP relay here, which the test can turn into a black hole or cut.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptctl.adapters import storage as storage_mod
from ckptctl.errors import StorageError
from tests.conftest import upload_tree
from tests.test_checkpoints_cli import assert_one_line_error, run


class Relay:
    """A TCP relay to ``upstream`` on 127.0.0.1. ``mode``: ``forward``; ``blackhole`` (accept,
    read, never answer); ``cut_after`` bytes of answers in all, then every connection is reset
    and new ones are accepted and reset at once (the store died)."""

    def __init__(self, upstream_port: int, mode: str = "forward", cut_after: int = 0) -> None:
        self.upstream_port, self.mode, self.cut_after = upstream_port, mode, cut_after
        self.sent = 0
        self.dead = False
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(64)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _track(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.append(s)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self._track(client)
            if self.dead:
                self._reset(client)
            elif self.mode == "blackhole":
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
            else:
                up = socket.create_connection(("127.0.0.1", self.upstream_port))
                self._track(up)
                threading.Thread(target=self._pump, args=(client, up, False), daemon=True).start()
                threading.Thread(target=self._pump, args=(up, client, True), daemon=True).start()

    def _swallow(self, client: socket.socket) -> None:
        try:
            while client.recv(65536):
                pass
        except OSError:
            pass

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if answers and self.mode == "cut_after":
                    with self._lock:
                        self.sent += len(data)
                        if self.sent > self.cut_after:
                            self.dead = True
                    if self.dead:
                        self.kill_all()
                        return
                dst.sendall(data)
        except OSError:
            pass

    @staticmethod
    def _reset(s: socket.socket) -> None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        except OSError:
            pass

    def kill_all(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            self._reset(s)

    def close(self) -> None:
        self.server.close()
        self.kill_all()


@pytest.fixture
def relay_factory(s3_server: str) -> Iterator[list[Relay]]:
    relays: list[Relay] = []
    yield relays
    for r in relays:
        r.close()


def _env_for(s3_env: dict[str, str], endpoint: str, timeout_s: str | None = None) -> dict[str, str]:
    env = dict(s3_env, CKPTCTL_STORAGE_OPTIONS=json.dumps({"client_kwargs": {"endpoint_url": endpoint}}))
    if timeout_s is not None:
        env[storage_mod.STORAGE_TIMEOUT_ENV] = timeout_s
    return env


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_store_that_never_answers_is_a_clear_error_within_the_timeout(
    s3_server: str, s3_env: dict[str, str], relay_factory: list[Relay]
) -> None:
    hole = Relay(_port(s3_server), mode="blackhole")
    relay_factory.append(hole)
    start = time.monotonic()
    proc = run("locate", "s3://bucket/run", env=_env_for(s3_env, hole.url, "1"))
    took = time.monotonic() - start
    assert_one_line_error(proc, 1, "not answering")
    assert storage_mod.STORAGE_TIMEOUT_ENV in proc.stderr  # the hint names the knob
    # 1 s per attempt, 2 botocore attempts x 2 s3fs tries, plus start-up: was 415 s
    assert took < 30, took


def test_store_dying_during_deep_verify_is_a_clear_error(
    run_root: Path, s3_server: str, s3_env: dict[str, str], s3_bucket: str, relay_factory: list[Relay]
) -> None:
    url = f"s3://{s3_bucket}/runs/r1"
    upload_tree(s3_server, run_root, url)
    step = run_root / "step_20"
    # the listing and .metadata pass; the store dies inside the shard reads of --deep
    shard_bytes = sum(p.stat().st_size for p in step.glob("*.distcp"))
    relay = Relay(_port(s3_server), mode="cut_after", cut_after=32 << 10)
    relay_factory.append(relay)
    assert shard_bytes > 64 << 10, shard_bytes
    proc = run("verify", f"{url}/step_20", "--deep", env=_env_for(s3_env, relay.url, "2"))
    assert relay.dead, "the relay never cut: the test did not test anything"
    assert_one_line_error(proc, 1, "unreachable or not answering")


def test_timeout_setting_is_checked(s3_env: dict[str, str]) -> None:
    for bad in ("0", "-1", "abc", "1e9", "nan"):
        proc = run("locate", "s3://bucket/run", env=_env_for(s3_env, "http://127.0.0.1:9", bad))
        assert_one_line_error(proc, 1, storage_mod.STORAGE_TIMEOUT_ENV)


def test_s3_options_get_timeouts_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("s3fs")
    monkeypatch.setenv(storage_mod.STORAGE_TIMEOUT_ENV, "7")
    monkeypatch.setenv(storage_mod.STORAGE_OPTIONS_ENV, json.dumps({"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}))
    st, _ = storage_mod.Storage.for_url("s3://bucket/x", skip_instance_cache=True)
    config = st.fs.config_kwargs
    assert config["connect_timeout"] == 7 and config["read_timeout"] == 7
    assert config["retries"]["total_max_attempts"] == storage_mod.ATTEMPTS and st.fs.retries == storage_mod.ATTEMPTS
    given = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}, "config_kwargs": {"read_timeout": 120}}
    monkeypatch.setenv(storage_mod.STORAGE_OPTIONS_ENV, json.dumps(given))
    st, _ = storage_mod.Storage.for_url("s3://bucket/x", skip_instance_cache=True)
    assert st.fs.config_kwargs["read_timeout"] == 120 and st.fs.config_kwargs["connect_timeout"] == 7
    local, _ = storage_mod.Storage.for_url("/tmp")
    assert local.is_local
    monkeypatch.setenv(storage_mod.STORAGE_TIMEOUT_ENV, "soon")
    with pytest.raises(StorageError, match=storage_mod.STORAGE_TIMEOUT_ENV):
        storage_mod.Storage.for_url("s3://bucket/x")

