"""The fault proxy is transparent to every way an S3 client frames a body.

An SDK's PUT may carry its body by Content-Length, by chunked transfer
encoding, or as `Content-Encoding: aws-chunked` (SigV4 streaming: the
payload cut into chunks with their own framing and signatures or a trailing
checksum, `x-amz-content-sha256: STREAMING-...`), itself sent by
Content-Length or chunked. For each framing this sends the same signed raw
request straight to the server and through the proxy (no faults), to two
keys, and checks that the server answered both alike and stored the same
bytes: whatever the server makes of a framing, it makes the same through
the proxy. Also a multipart upload through the proxy (boto3) read back
whole from the server.

Usage: python tools/s3/proxy_selftest.py --server PORT --proxy PORT --bucket NAME
Prints one JSON object; exits 1 naming the framing that differs.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import socket
import sys
import zlib
from base64 import b64encode

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

CREDENTIALS = Credentials("test", "test")
REGION = "us-east-1"


def payload(n: int) -> bytes:
    return bytes((i * 131 + i // 251) % 256 for i in range(n))


def chunked(body: bytes, size: int) -> bytes:
    """HTTP/1.1 chunked transfer encoding of `body`."""
    out = b""
    for at in range(0, len(body), size):
        piece = body[at : at + size]
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def aws_chunked(body: bytes, size: int) -> tuple[bytes, str]:
    """`aws-chunked` with an unsigned payload and a CRC32 trailer (what the
    SDKs send for STREAMING-UNSIGNED-PAYLOAD-TRAILER), and the checksum."""
    out = b""
    for at in range(0, len(body), size):
        piece = body[at : at + size]
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    crc = b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    return out + f"0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n".encode(), crc


def framings(body: bytes) -> dict[str, tuple[dict, bytes]]:
    """Name -> (headers beyond the signed ones, wire body)."""
    streamed, _ = aws_chunked(body, 8192)
    aws = {
        "Content-Encoding": "aws-chunked",
        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        "x-amz-decoded-content-length": str(len(body)),
        "x-amz-trailer": "x-amz-checksum-crc32",
    }
    return {
        "content-length": ({"Content-Length": str(len(body))}, body),
        "chunked": ({"Transfer-Encoding": "chunked"}, chunked(body, 5000)),
        "aws-chunked by content-length": ({**aws, "Content-Length": str(len(streamed))}, streamed),
        "aws-chunked, chunked": ({**aws, "Transfer-Encoding": "chunked"}, chunked(streamed, 7000)),
    }


def send_raw(port: int, path: str, headers: dict, wire_body: bytes) -> tuple[int, bytes]:
    """A signed PUT written to the socket as is; the status and body."""
    host = f"127.0.0.1:{port}"
    sha = headers.get("x-amz-content-sha256", hashlib.sha256(wire_body).hexdigest())
    request = AWSRequest(method="PUT", url=f"http://{host}{path}", headers={**headers, "x-amz-content-sha256": sha})
    SigV4Auth(CREDENTIALS, "s3", REGION).add_auth(request)
    head = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "host")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + b"Connection: close\r\n\r\n" + wire_body)
        response = http.client.HTTPResponse(sock, method="PUT")
        response.begin()
        return response.status, response.read()


def client(port: int):
    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="test",
                        aws_secret_access_key="test", region_name=REGION)


def multipart_through(proxy: int, server: int, bucket: str) -> bool:
    through, direct = client(proxy), client(server)
    parts_data = [payload(5 * 1024 * 1024), payload(123_457)]
    upload = through.create_multipart_upload(Bucket=bucket, Key="multipart")
    parts = []
    for n, data in enumerate(parts_data, start=1):
        etag = through.upload_part(Bucket=bucket, Key="multipart", UploadId=upload["UploadId"], PartNumber=n, Body=data)["ETag"]
        parts.append({"ETag": etag, "PartNumber": n})
    through.complete_multipart_upload(Bucket=bucket, Key="multipart", UploadId=upload["UploadId"],
                                      MultipartUpload={"Parts": parts}, IfNoneMatch="*")
    return direct.get_object(Bucket=bucket, Key="multipart")["Body"].read() == b"".join(parts_data)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", type=int, required=True)
    p.add_argument("--proxy", type=int, required=True)
    p.add_argument("--bucket", required=True)
    a = p.parse_args()
    body = payload(50_000)
    direct = client(a.server)
    results, failures = {}, []
    for name, (headers, wire) in framings(body).items():
        key = name.replace(" ", "-").replace(",", "")
        answers = [send_raw(port, f"/{a.bucket}/{key}-{via}", headers, wire) for port, via in ((a.server, "direct"), (a.proxy, "proxy"))]
        stored = [direct.get_object(Bucket=a.bucket, Key=f"{key}-{via}")["Body"].read() if s == 200 else None
                  for (s, _), via in zip(answers, ("direct", "proxy"))]
        results[name] = {"status": [s for s, _ in answers], "stored_bytes": [len(x) if x is not None else None for x in stored],
                         "stored_is_payload": [x == body for x in stored]}
        if answers[0][0] != answers[1][0] or stored[0] != stored[1]:
            failures.append(name)
    # The framings every S3 server takes must also have stored the payload itself.
    for name in ("content-length", "chunked"):
        if results[name]["stored_is_payload"] != [True, True]:
            failures.append(f"{name} (payload)")
    results["multipart"] = multipart_through(a.proxy, a.server, a.bucket)
    if not results["multipart"]:
        failures.append("multipart")
    json.dump(results, sys.stdout)
    print()
    if failures:
        sys.exit(f"differs through the proxy: {', '.join(failures)}")


if __name__ == "__main__":
    main()
