"""Object store faults benchmark (issue 32, item 2): a checkpoint's round trip through a local
S3 server (moto) behind the fault-injecting proxy of the tests (``tests/s3_faults.py``), clean
and with a share of requests failing, and how long a dead endpoint takes to become
``StorageUnavailable``.

    python bench/storage_faults.py [--mib 64] [--rate 0.2] [--sdk-attempts 10] [--bound 5]

Round trip: ``upload_dir`` of a checkpoint (one shard of ``--mib`` MiB, a small file and its
manifest), ``verify_stored`` (every byte read back and hashed), ``download_dir``; timed at
rate 0 (the baseline, same proxy, same run) and at ``--rate`` (503 SlowDown, resets, stalls of
0.5 s, answers cut half-way, in turn; seed 32). ``--sdk-attempts``: the AWS SDK's own retries
(``SHUNTER_S3_MAX_ATTEMPTS``; 1 leaves every fault to ``storage.objects``). Dead endpoint: a
closed port with ``SHUNTER_STORAGE_RETRY_S=--bound``; reported is the time to the error.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


def round_trip(bucket: str, src: Path, work: Path) -> float:
    import storage
    from worker.checkpoint_callback import verify_stored

    uri = storage.join(f"s3://{bucket}", "job", "checkpoint-" + secrets.token_hex(3))
    start = time.monotonic()
    storage.upload_dir(src, uri)
    problem = verify_stored(uri)
    if problem is not None:
        raise SystemExit(f"the stored checkpoint does not verify: {problem}")
    back = storage.download_dir(uri, work / uri.rsplit("/", 1)[-1])
    took = time.monotonic() - start
    if (back / "shard.bin").read_bytes() != (src / "shard.bin").read_bytes():
        raise SystemExit("the downloaded shard differs")
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--rate", type=float, default=0.2)
    p.add_argument("--sdk-attempts", type=int, default=10)
    p.add_argument("--bound", type=float, default=5.0)
    args = p.parse_args()
    from s3_faults import S3Faults  # the tests' proxy
    from s3_server import aws_env, running_s3

    import storage
    from trainer_core.manifest import write_manifest

    work = Path(tempfile.mkdtemp(prefix="bench-storage-faults-"))
    src = work / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(os.urandom(args.mib * 1024 * 1024))
    (src / "trainer_state.json").write_text('{"step": 4}')
    write_manifest(src)
    with running_s3() as s3:
        bucket = s3.bucket("bench-" + secrets.token_hex(3))
        times = {}
        for rate in (0.0, args.rate):
            with S3Faults(s3.endpoint, rate=rate, seed=32, stall_s=0.5) as proxy:
                env = {
                    **s3.env,
                    "AWS_ENDPOINT_URL": proxy.endpoint,
                    "SHUNTER_S3_MAX_ATTEMPTS": str(args.sdk_attempts),
                }
                with aws_env(env):
                    times[rate] = round_trip(bucket, src, work)
                injected = {k: v for k, v in proxy.counts.items() if k != "requests"}
                print(
                    f"rate {rate:.0%}: round trip of {args.mib} MiB in {times[rate]:.2f} s "
                    f"({proxy.counts['requests']} requests, injected {injected or 'none'})"
                )
        print(f"ratio faulty/clean: {times[args.rate] / times[0.0]:.2f}x")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {
            **s3.env,
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "SHUNTER_S3_MAX_ATTEMPTS": str(args.sdk_attempts),
            "SHUNTER_STORAGE_RETRY_S": str(args.bound),
        }
        with aws_env(env):
            start = time.monotonic()
            try:
                storage.list_files(f"s3://{bucket}/job")
            except storage.StorageUnavailable as exc:
                took = time.monotonic() - start
                print(
                    f"dead endpoint: StorageUnavailable after {took:.2f} s (bound {args.bound:g} s)"
                )
                print(f"  {str(exc)[:160]}")
            else:
                raise SystemExit("a dead endpoint answered")


if __name__ == "__main__":
    main()
