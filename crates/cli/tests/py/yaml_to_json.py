"""Reads the YAML files named on the command line and prints them as one JSON object on stdout:
{"<file name>": [<every non-empty document of that file>, ...], ...}.

Used by crates/cli/tests/deploy_manifests.rs, which has no YAML parser of its own, to check the
manifests in deploy/. It only converts (with PyYAML's safe loader, which kubernetes-validate
brings into .venv-test); it never decides whether a manifest is right.
"""

import json
import os
import sys

import yaml


def main() -> int:
    out = {}
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            docs = [doc for doc in yaml.safe_load_all(f) if doc is not None]
        out[os.path.basename(path)] = docs
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
