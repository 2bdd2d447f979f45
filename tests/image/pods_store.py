"""The pods test's hands on the stores (tests/image/pods.sh): moto's S3
server and Azurite on the host's loopback, reached without segpredict's
own code (boto3 from the venv for S3; a SharedKey-signed client of the
Blob REST API, standard library only, for Azurite).

  pods_store.py STORE ENDPOINT make BUCKET           create the bucket/container
  pods_store.py STORE ENDPOINT put BUCKET KEY FILE   upload FILE under KEY
  pods_store.py STORE ENDPOINT list BUCKET PREFIX    one key a line
  pods_store.py STORE ENDPOINT fetch BUCKET PREFIX DIR   every object below PREFIX into DIR
  pods_store.py STORE ENDPOINT committed BUCKET PREFIX PART
      exit 0 when a commit record of PREFIX's log names a file starting PART

STORE is s3 or azure; ENDPOINT http://127.0.0.1:PORT.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import os
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

ACCOUNT = "devstoreaccount1"
# Azurite's published development key (not a secret).
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Azure:
    def __init__(self, endpoint: str):
        self.endpoint = endpoint.rstrip("/")

    def request(self, method, path, query=(), headers=None, body=b""):
        path = urllib.parse.quote(f"/{ACCOUNT}{path}")
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        if method == "PUT":  # urllib would add a form's type, unsigned
            headers["content-type"] = "application/octet-stream"
        headers["x-ms-date"] = email.utils.formatdate(usegmt=True)
        headers["x-ms-version"] = "2021-08-06"
        standard = ["content-encoding", "content-language", None, "content-md5", "content-type", "date",
                    "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"]
        lines = [method] + [str(len(body) or "") if n is None else headers.get(n, "") for n in standard]
        ms = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-"))
        resource = f"/{ACCOUNT}{path}" + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(query))
        to_sign = "\n".join(lines) + "\n" + ms + resource
        mac = hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()
        headers["authorization"] = f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}"
        url = self.endpoint + path + ("?" + urllib.parse.urlencode(query) if query else "")
        req = urllib.request.Request(url, data=body if method == "PUT" else None, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read()

    def make(self, bucket):
        self.request("PUT", f"/{bucket}", [("restype", "container")])

    def put(self, bucket, key, data):
        self.request("PUT", f"/{bucket}/{key}", headers={"x-ms-blob-type": "BlockBlob"}, body=data)

    def get(self, bucket, key):
        return self.request("GET", f"/{bucket}/{key}")

    def list(self, bucket, prefix):
        names, marker = [], ""
        while True:
            query = [("comp", "list"), ("prefix", prefix), ("restype", "container")]
            if marker:
                query.append(("marker", marker))
            root = ET.fromstring(self.request("GET", f"/{bucket}", query))
            names += [b.findtext("Name") for b in root.iter("Blob")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return names


class S3:
    def __init__(self, endpoint: str):
        import boto3

        self.client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                                   aws_secret_access_key="test", region_name="us-east-1")

    def make(self, bucket):
        self.client.create_bucket(Bucket=bucket)

    def put(self, bucket, key, data):
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def get(self, bucket, key):
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def list(self, bucket, prefix):
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


def committed(store, bucket, prefix, part) -> bool:
    for key in store.list(bucket, f"{prefix}/_progress/log/"):
        if os.path.basename(key).startswith("."):
            continue
        try:
            record = json.loads(store.get(bucket, key))
        except Exception:
            continue
        if record.get("kind") != "commit":
            continue
        if any(f.get("key", "").startswith(part) for f in record.get("files", [])):
            return True
    return False


def main() -> None:
    kind, endpoint, op, bucket, *rest = sys.argv[1:]
    store = (Azure if kind == "azure" else S3)(endpoint)
    if op == "make":
        store.make(bucket)
    elif op == "put":
        key, path = rest
        with open(path, "rb") as f:
            store.put(bucket, key, f.read())
    elif op == "list":
        print("\n".join(store.list(bucket, rest[0])))
    elif op == "fetch":
        prefix, out = rest
        for key in store.list(bucket, prefix):
            path = os.path.join(out, key[len(prefix):].lstrip("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(store.get(bucket, key))
    elif op == "committed":
        try:
            sys.exit(0 if committed(store, bucket, *rest) else 1)
        except OSError as e:  # the server busy or restarting: not yet
            sys.exit(f"listing {bucket}: {e}")
    else:
        sys.exit(f"unknown operation {op}")


if __name__ == "__main__":
    main()
