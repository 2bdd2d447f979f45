"""Reads the Kubernetes manifests under pipelines/deploy/, validates each
against the Kubernetes API schemas shipped inside the `kubernetes-validate`
package (offline, strict: an unknown field is an error), and prints them as
JSON for tests/deploy.rs, which checks what they mean and runs their pods'
commands.

Usage: python tests/deploy.py FILE...
"""

from __future__ import annotations

import json
import sys

import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.37.0"


def main() -> None:
    documents = []
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                try:
                    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
                except kubernetes_validate.ValidationError as e:
                    sys.exit(f"{path}: {e.message} at {'.'.join(map(str, e.path))}")
                documents.append({"file": path, "resource": doc})
    json.dump(documents, sys.stdout)


if __name__ == "__main__":
    main()
