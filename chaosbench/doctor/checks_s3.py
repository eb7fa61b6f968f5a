"""S3: credentials, bucket, and a put/get/delete probe, with the exact error mapped to a fix."""
from __future__ import annotations

import uuid

from .result import CheckResult, Status
from .target import Target

FIXES = {
    "NoCredentialsError": "no credentials found: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, set "
                          "AWS_PROFILE, or attach an instance/pod role",
    "InvalidAccessKeyId": "the access key id is not known to this endpoint: check AWS_ACCESS_KEY_ID (and that "
                          "the credentials belong to this endpoint/account)",
    "SignatureDoesNotMatch": "the secret key is wrong: check AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "the credentials are valid but not allowed: grant s3:PutObject/GetObject/DeleteObject/"
                    "ListBucket on the bucket and prefix",
    "403": "forbidden: check the credentials and the bucket policy",
    "NoSuchBucket": "the bucket does not exist: create it (`aws s3 mb s3://{bucket}`) or fix checkpoint.s3.bucket",
    "404": "the bucket does not exist: create it (`aws s3 mb s3://{bucket}`) or fix checkpoint.s3.bucket",
    "EndpointConnectionError": "cannot connect to the endpoint: check checkpoint.s3.endpoint_url and the network",
    "ConnectTimeoutError": "the endpoint does not answer: check checkpoint.s3.endpoint_url and the network",
}


def _describe(e: Exception) -> tuple[str, str]:
    """(error code, message) for botocore exceptions."""
    code = type(e).__name__
    resp = getattr(e, "response", None)
    if resp:
        code = resp.get("Error", {}).get("Code") or str(resp.get("ResponseMetadata", {}).get("HTTPStatusCode"))
    return code, str(e)


def _fail(name: str, e: Exception, bucket: str) -> CheckResult:
    code, msg = _describe(e)
    fix = FIXES.get(code) or FIXES.get(type(e).__name__) or "see the error; check endpoint, credentials and bucket"
    return CheckResult(name, Status.FAIL, f"{code}: {msg}", fix.format(bucket=bucket), details={"code": code})


def s3_checks(t: Target) -> list[CheckResult]:
    s3 = t.checkpoint.get("s3") or {}
    if not s3.get("enabled"):
        return [CheckResult("s3", Status.SKIP, "S3 tier not enabled in the trainer config (checkpoint.s3.enabled)")]
    bucket = s3.get("bucket")
    if not bucket:
        return [CheckResult("s3", Status.FAIL, f"{t.trainer_config_file}: checkpoint.s3.bucket is empty",
                            "set checkpoint.s3.bucket")]
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    endpoint = t.env.get("AWS_ENDPOINT_URL_S3") or t.env.get("AWS_ENDPOINT_URL") or s3.get("endpoint_url")
    session = boto3.Session(region_name=s3.get("region") or t.env.get("AWS_DEFAULT_REGION") or "us-east-1",
                            aws_access_key_id=t.env.get("AWS_ACCESS_KEY_ID"),
                            aws_secret_access_key=t.env.get("AWS_SECRET_ACCESS_KEY"),
                            aws_session_token=t.env.get("AWS_SESSION_TOKEN"))
    creds = session.get_credentials()
    where = endpoint or "AWS"
    if creds is None:
        return [CheckResult("s3 credentials", Status.FAIL, f"NoCredentialsError: no AWS credentials for {where}",
                            FIXES["NoCredentialsError"])]
    results = [CheckResult("s3 credentials", Status.PASS,
                           f"access key ...{creds.access_key[-4:]} from {creds.method}")]
    client = session.client("s3", endpoint_url=endpoint, config=Config(
        connect_timeout=3, read_timeout=5, retries={"max_attempts": 1}, s3={"addressing_style": "path"}))
    name = f"s3 bucket {bucket} at {where}"
    try:
        client.head_bucket(Bucket=bucket)
        results.append(CheckResult(name, Status.PASS, "HeadBucket ok"))
    except (ClientError, BotoCoreError) as e:
        if _describe(e)[0] in ("400", "403", "404"):
            # HEAD responses carry no body, so no error code: ask again with a GET to learn the exact one
            try:
                client.list_objects_v2(Bucket=bucket, MaxKeys=1)
            except (ClientError, BotoCoreError) as e2:
                e = e2
        results.append(_fail(name, e, bucket))
        return results
    key = f"{(s3.get('prefix') or '').strip('/')}/.chaosbench-doctor-probe-{uuid.uuid4().hex[:8]}".lstrip("/")
    step = "put"
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"chaosbench doctor probe")
        step = "get"
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        step = "delete"
        client.delete_object(Bucket=bucket, Key=key)
        ok = body == b"chaosbench doctor probe"
        results.append(CheckResult(f"s3 put/get/delete s3://{bucket}/{key}", Status.PASS if ok else Status.FAIL,
                                   "round trip ok" if ok else f"read back {body[:40]!r}, not what was written",
                                   "" if ok else "the endpoint returns different content: check proxies/caches"))
    except (ClientError, BotoCoreError) as e:
        r = _fail(f"s3 {step} s3://{bucket}/{key}", e, bucket)
        r.evidence = f"{step} failed: {r.evidence}"
        results.append(r)
    return results
