"""The S3 endpoint over real HTTP: boto3 sees 403 / 503 / recovery; the control API rejects bad input."""
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from chaosbench.services.ports import free_port
from chaosbench.services.s3 import S3FaultError, S3Server, get_s3_fault, s3_health, set_s3_fault

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _client(url, attempts=1):
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="k",
                        aws_secret_access_key="s",
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"mode": "standard", "total_max_attempts": attempts},
                                      connect_timeout=2, read_timeout=5))


@pytest.fixture(scope="module")
def s3():
    with S3Server(bucket="chaosbench") as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(s3):
    set_s3_fault(s3.endpoint_url, "ok")
    yield
    set_s3_fault(s3.endpoint_url, "ok")


def test_bucket_exists_and_roundtrip(s3):
    c = _client(s3.endpoint_url)
    assert "chaosbench" in [b["Name"] for b in c.list_buckets()["Buckets"]]
    c.put_object(Bucket="chaosbench", Key="a/b.bin", Body=b"x" * 1000)
    assert c.get_object(Bucket="chaosbench", Key="a/b.bin")["Body"].read() == b"x" * 1000


def test_403_refuses_credentials_then_recovers(s3):
    c = _client(s3.endpoint_url)
    assert set_s3_fault(s3.endpoint_url, "403") == "403"
    with pytest.raises(ClientError) as err:
        c.put_object(Bucket="chaosbench", Key="k", Body=b"1")
    assert err.value.response["Error"]["Code"] == "AccessDenied"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as err:       # HEAD has no body: only the status says it
        c.head_object(Bucket="chaosbench", Key="k")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    set_s3_fault(s3.endpoint_url, "ok")
    c.put_object(Bucket="chaosbench", Key="k", Body=b"1")
    assert c.get_object(Bucket="chaosbench", Key="k")["Body"].read() == b"1"


def test_503_slowdown_is_retried_by_boto3_then_recovers(s3):
    set_s3_fault(s3.endpoint_url, "503")
    c = _client(s3.endpoint_url, attempts=3)
    with pytest.raises(ClientError) as err:
        c.put_object(Bucket="chaosbench", Key="k2", Body=b"2")
    assert err.value.response["Error"]["Code"] == "SlowDown"
    assert err.value.response["ResponseMetadata"]["RetryAttempts"] == 2   # boto3 treats it as retryable
    assert get_s3_fault(s3.endpoint_url) == "503"
    set_s3_fault(s3.endpoint_url, "ok")
    c.put_object(Bucket="chaosbench", Key="k2", Body=b"2")


def test_control_api_bad_input(s3):
    with pytest.raises(ValueError, match="valid modes"):
        set_s3_fault(s3.endpoint_url, "500")
    for body in (b"{not json", b'{"mode": "teapot"}', b"[1]"):
        req = urllib.request.Request(f"{s3.endpoint_url}/_chaos/fault", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 400
        assert "valid_modes" in json.loads(err.value.read())
    assert get_s3_fault(s3.endpoint_url) == "ok"   # a bad request changes nothing
    assert s3_health(s3.endpoint_url)["bucket"] == "chaosbench"


def test_unreachable_endpoint_error_is_clear():
    with pytest.raises(S3FaultError, match="unreachable"):
        set_s3_fault(f"http://127.0.0.1:{free_port()}", "ok", timeout=2)


def test_cli_serves_and_stops_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "chaosbench.services.s3", "--port", str(port),
                             "--bucket", "clib"], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "s3.log", "wb"), text=True)
    try:
        line = proc.stdout.readline()
        assert "ready" in line, line
        url = f"http://127.0.0.1:{port}"
        assert s3_health(url)["bucket"] == "clib"
        set_s3_fault(url, "403")
        with pytest.raises(ClientError):
            _client(url).list_objects_v2(Bucket="clib")
        set_s3_fault(url, "ok")
        assert _client(url).list_objects_v2(Bucket="clib")["KeyCount"] == 0
        proc.terminate()
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
