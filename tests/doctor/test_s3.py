"""S3 checks against a real moto server over HTTP: success, no credentials, wrong credentials (moto's IAM
auth switched on), a principal without permission, a missing bucket, an unreachable endpoint."""
import pytest
import requests

from chaosbench.doctor import Status, Target
from chaosbench.doctor.checks_s3 import s3_checks
from chaosbench.services.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def moto_url():
    from moto.server import ThreadedMotoServer
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        import boto3
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_kw(CREDS)).create_bucket(Bucket="ckpt")
        yield url
    finally:
        requests.post(f"{url}/moto-api/reset-auth", data=b"inf", timeout=5)
        server.stop()


def _kw(env):
    return {"aws_access_key_id": env.get("AWS_ACCESS_KEY_ID"), "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY")}


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch, tmp_path):
    """Only the credentials each test gives: no ~/.aws, no instance metadata lookups."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def auth_on(moto_url):
    requests.post(f"{moto_url}/moto-api/reset-auth", data=b"0", timeout=5).raise_for_status()
    try:
        yield
    finally:
        requests.post(f"{moto_url}/moto-api/reset-auth", data=b"inf", timeout=5).raise_for_status()


def _target(url, env, bucket="ckpt"):
    cfg = {"checkpoint": {"s3": {"enabled": True, "endpoint_url": url, "bucket": bucket, "prefix": "checkpoints",
                                 "region": "us-east-1"}}}
    return Target(source="env", env=dict(env), trainer_config=cfg, trainer_config_file="cfg.yaml")


def test_round_trip_passes(moto_url):
    res = s3_checks(_target(moto_url, CREDS))
    assert [r.status for r in res] == [Status.PASS] * 3, [r.evidence for r in res]
    assert res[2].name.startswith("s3 put/get/delete s3://ckpt/checkpoints/.chaosbench-doctor-probe-")
    import boto3
    left = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1", **_kw(CREDS)).list_objects_v2(
        Bucket="ckpt").get("KeyCount")
    assert left == 0, "the probe object must be deleted"


def test_no_credentials(moto_url):
    res = s3_checks(_target(moto_url, {}))
    assert len(res) == 1 and res[0].status == Status.FAIL
    assert res[0].evidence.startswith("NoCredentialsError") and "AWS_ACCESS_KEY_ID" in res[0].fix


def test_wrong_credentials_403(moto_url, auth_on):
    res = s3_checks(_target(moto_url, {"AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG0", "AWS_SECRET_ACCESS_KEY": "x"}))
    bucket = res[-1]
    assert bucket.status == Status.FAIL
    assert bucket.details["code"] == "InvalidAccessKeyId", bucket.evidence
    assert "access key id is not known" in bucket.fix


def test_valid_key_without_permission_access_denied(moto_url):
    import boto3
    iam = boto3.client("iam", endpoint_url=moto_url, region_name="us-east-1", **_kw(CREDS))
    iam.create_user(UserName="nobody")
    key = iam.create_access_key(UserName="nobody")["AccessKey"]
    requests.post(f"{moto_url}/moto-api/reset-auth", data=b"0", timeout=5).raise_for_status()
    try:
        res = s3_checks(_target(moto_url, {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                                           "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}))
    finally:
        requests.post(f"{moto_url}/moto-api/reset-auth", data=b"inf", timeout=5).raise_for_status()
    r = res[-1]
    assert r.status == Status.FAIL and r.details["code"] == "AccessDenied", r.evidence
    assert "grant s3:PutObject" in r.fix


def test_missing_bucket(moto_url):
    r = s3_checks(_target(moto_url, CREDS, bucket="no-such-bucket"))[-1]
    assert r.status == Status.FAIL and r.details["code"] == "NoSuchBucket"
    assert "aws s3 mb s3://no-such-bucket" in r.fix


def test_unreachable_endpoint():
    r = s3_checks(_target(f"http://127.0.0.1:{free_port()}", CREDS))[-1]
    assert r.status == Status.FAIL and r.details["code"] == "EndpointConnectionError"
    assert "endpoint_url" in r.fix
