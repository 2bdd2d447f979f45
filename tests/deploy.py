"""Reads the Kubernetes manifests under pipelines/deploy/, validates each
against the Kubernetes API schemas shipped inside the `kubernetes-validate`
package (offline, strict: an unknown field is an error), and prints them as
JSON for tests/deploy.rs, which checks what they mean and runs their pods'
commands. It also refuses a credential written into a manifest: an env
variable that carries one (AWS_SECRET_ACCESS_KEY, ...) with a literal
`value`, or a Secret with its data; they come from a Secret made outside the
repository (valueFrom.secretKeyRef).

Usage: python tests/deploy.py FILE...
"""

from __future__ import annotations

import json
import sys

import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.37.0"

# Variables that hold a credential for the object stores segpredict reads
# (object_store's builders read them from the environment).
CREDENTIAL_VARS = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_SECRET",
}


def literal_credentials(node, path=()):
    """Where `node` sets a credential variable to a literal value, or
    carries a Secret's data: (path, what) pairs."""
    found = []
    if isinstance(node, dict):
        if node.get("kind") == "Secret" and (node.get("data") or node.get("stringData")):
            found.append((path, "a Secret with its data"))
        if node.get("name") in CREDENTIAL_VARS and "value" in node:
            found.append((path, f"{node['name']} as a literal value"))
        for key, value in node.items():
            found += literal_credentials(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += literal_credentials(value, (*path, i))
    return found


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
                for where, what in literal_credentials(doc):
                    sys.exit(
                        f"{path}: {what} at {'.'.join(map(str, where))}: credentials come from a "
                        "Secret made outside the repository (valueFrom.secretKeyRef)"
                    )
                documents.append({"file": path, "resource": doc})
    json.dump(documents, sys.stdout)


if __name__ == "__main__":
    main()
