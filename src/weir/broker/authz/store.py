"""Where a single-node broker keeps its ACLs: `acls.json` in its metadata directory (the first
log directory), written whole and atomically (temp file, fsync, rename) on every change:

    {"version": 1, "acls": [{"resourceType": "Topic", "name": "orders",
      "patternType": "LITERAL", "principal": "User:alice", "host": "*",
      "operation": "Read", "permissionType": "Allow"}, ...]}

Thread-safety: `load` and `write` touch the disk and run off the event loop (at start-up, or in
an executor); the authorizer serialises writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from weir import diskio
from weir.broker.authz.acl import AclBinding, from_document, to_document
from weir.durable import write_atomically

ACLS_FILE = "acls.json"
FORMAT_VERSION = 1


class AclStore(Protocol):
    def load(self) -> frozenset[AclBinding]: ...

    def write(self, before: frozenset[AclBinding], after: frozenset[AclBinding]) -> None:
        """Make `after` the stored ACLs (`before` is what the store held)."""


class FileAclStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ACLS_FILE

    def load(self) -> frozenset[AclBinding]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return frozenset()
        if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: not a version {FORMAT_VERSION} ACL file")
        return frozenset(from_document(entry) for entry in document.get("acls", []))

    def write(self, before: frozenset[AclBinding], after: frozenset[AclBinding]) -> None:
        entries = sorted((to_document(b) for b in after), key=lambda d: sorted(d.items()))
        document = {"version": FORMAT_VERSION, "acls": entries}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, [json.dumps(document, indent=1)], diskio.METADATA, 0o600)
