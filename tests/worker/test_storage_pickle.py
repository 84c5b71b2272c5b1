"""The S3 filesystem keeps its retry bound when pickled (issue 32, item 2). Ray Train gets the
filesystem in ``RunConfig`` and uploads checkpoints with the copy it unpickles; pyarrow's own
pickle dropped the retry strategy (back to the SDK's 3 attempts), and ``copy_files`` ignores a
part upload that failed past them, so under a 20% fault rate a checkpoint was stored without a
file (registered unverified). Counted at a store that is down: each request is tried
``SHUNTER_S3_MAX_ATTEMPTS`` times, before and after a pickle round trip."""

from __future__ import annotations

import pickle
import secrets

import pytest
from s3_faults import S3Faults
from s3_server import aws_env, running_s3

import storage


@pytest.mark.parametrize("attempts", [5])
def test_pickled_filesystem_keeps_its_retry_bound(attempts: int) -> None:
    with running_s3() as s3, S3Faults(s3.endpoint, rate=0.0) as proxy:
        bucket = s3.bucket("pickle-" + secrets.token_hex(4))
        env = {**s3.env, "AWS_ENDPOINT_URL": proxy.endpoint,
               "SHUNTER_S3_MAX_ATTEMPTS": str(attempts)}  # fmt: skip
        with aws_env(env):
            fs, base = storage.resolve(f"s3://{bucket}/x")
        copy = pickle.loads(pickle.dumps(fs))
        assert copy.type_name == "s3"
        proxy.down = True
        for which in (fs, copy):
            before = proxy.counts["requests"]
            with pytest.raises(OSError):
                which.get_file_info(f"{base}/missing.bin")
            assert proxy.counts["requests"] - before == attempts, which
