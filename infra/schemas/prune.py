#!/usr/bin/env python3
"""Build a small, self-contained set of Kubernetes JSON schemas for a handful of
kinds out of the `kubernetes-validate` PyPI wheel.

Input layout (inside the wheel, per Kubernetes version):
    kubernetes_validate/kubernetes-json-schema/v1.31.0-local-strict/
        _definitions.json            {"$schema": 2020-12, "$id": "https://kubernetes.io/api/_definitions.json",
                                      "$defs": {"io.k8s.api.apps.v1.Deployment": {...}, ...}}   (~1.3 MB)
        deployment-apps-v1.json      {"$id": "https://kubernetes.io/api/deployment/apps/v1",
                                      "properties": {"spec": {"$ref": "/api/_definitions.json#/$defs/..."}}}
    Inside _definitions.json all refs are local: "#/$defs/<name>".

Outputs (into --out):
  * k8s-<ver>-strict.json  ONE combined schema: `$defs` = only the definitions reachable
    from the chosen kinds (+ one root per kind under `$defs`, e.g. "root.apps.v1.Deployment"),
    and a top level that dispatches on apiVersion/kind with if/then.  All refs are "#/$defs/..",
    no $id, so a validator never has to resolve anything outside the document.
  * standalone/<kind>-<group>-<ver>.json  one fully self-contained file per kind (own pruned $defs).

Options:
  --strip-descriptions  drop "description" keywords (pure annotations; cuts the size to about a third)
  --strip-x-kubernetes  drop "x-kubernetes-*" keywords (annotations only, unknown to validators)
  --int-or-string-anyof rewrite IntOrString/Quantity `oneOf` -> `anyOf`.  Upstream uses
                        oneOf:[{type:[string,null]},{type:[integer,null]}], so an explicit JSON
                        `null` matches both branches and FAILS oneOf.  anyOf makes null pass.
  --require-apiversion-kind  add "required": ["apiVersion","kind","metadata"] to each kind root
                        (upstream roots have no `required`; the dispatcher requires apiVersion+kind anyway).

Usage (stdlib only, Python >= 3.7):
  python3 prune.py --wheel-dir /tmp/research/k8s/wheel --version 1.31.0 --out /tmp/research/k8s/schemas \
      --strip-descriptions
"""
import argparse
import copy
import json
import os
import re
import sys

# default (apiVersion, kind) set; override/extend with --kind apiVersion:Kind
DEFAULT_KINDS = [
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("policy/v1", "PodDisruptionBudget"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("v1", "ServiceAccount"),
    ("v1", "Namespace"),
]


def stem_for(api_version, kind):
    """File stem the wheel uses (same rule as kubernetes_validate.utils.validate):
    'networking.k8s.io/v1' -> 'networking-v1', 'apps/v1' -> 'apps-v1', 'v1' -> 'v1'."""
    return kind.lower() + "-" + re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)

DEFS_PREFIXES = ("/api/_definitions.json#/$defs/", "_definitions.json#/$defs/", "#/$defs/")
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def root_key(api_version, kind):
    return "root." + api_version.replace("/", ".") + "." + kind


def def_name(ref):
    for p in DEFS_PREFIXES:
        if ref.startswith(p):
            return ref[len(p):]
    raise ValueError("unexpected $ref form: %r" % ref)


def rewrite(node, opts, props_ctx=False):
    """Deep-copy `node`, rewriting refs to '#/$defs/<name>' and dropping annotations.

    props_ctx=True means `node` is the value of a "properties" keyword: its keys are property
    NAMES (a property may legitimately be called "description"), so nothing is dropped there."""
    if isinstance(node, list):
        return [rewrite(x, opts) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if props_ctx:
            out[k] = rewrite(v, opts)
            continue
        if k == "$ref":
            out[k] = "#/$defs/" + def_name(v)
            continue
        if k in ("$schema", "$id"):
            continue
        if opts.strip_descriptions and k == "description" and isinstance(v, str):
            continue
        if opts.strip_x_kubernetes and k.startswith("x-kubernetes-"):
            continue
        # "properties", "patternProperties", "$defs" map names -> schemas
        out[k] = rewrite(v, opts, props_ctx=k in ("properties", "patternProperties", "$defs"))
    return out


def refs_in(node, acc, props_ctx=False):
    if isinstance(node, list):
        for x in node:
            refs_in(x, acc)
    elif isinstance(node, dict):
        for k, v in node.items():
            if not props_ctx and k == "$ref" and isinstance(v, str):
                acc.add(def_name(v))
            else:
                refs_in(v, acc, props_ctx=(not props_ctx) and k in ("properties", "patternProperties"))


def closure(start, all_defs):
    seen, todo = set(), list(start)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        if n not in all_defs:
            raise KeyError("definition %s not found" % n)
        seen.add(n)
        acc = set()
        refs_in(all_defs[n], acc)
        todo.extend(acc - seen)
    return seen


def fix_int_or_string(defs):
    for n in ("io.k8s.apimachinery.pkg.util.intstr.IntOrString",
              "io.k8s.apimachinery.pkg.api.resource.Quantity"):
        d = defs.get(n)
        if d and "oneOf" in d:
            d["anyOf"] = d.pop("oneOf")


def build(opts):
    src = os.path.join(opts.wheel_dir, "kubernetes_validate", "kubernetes-json-schema",
                       "v%s-local%s" % (opts.version, "" if opts.non_strict else "-strict"))
    if not os.path.isdir(src):
        sys.exit("no such schema dir: " + src)
    all_defs = json.load(open(os.path.join(src, "_definitions.json")))["$defs"]

    roots = {}
    kinds = [(a, k, stem_for(a, k)) for a, k in opts.kinds]
    for api_version, kind, stem in kinds:
        r = json.load(open(os.path.join(src, stem + ".json")))
        # sanity: file is the kind we think it is
        assert r["properties"]["apiVersion"]["enum"] == [api_version], stem
        assert r["properties"]["kind"]["enum"] == [kind], stem
        r = rewrite(r, opts)
        if opts.require_apiversion_kind:
            r["required"] = ["apiVersion", "kind", "metadata"]
        roots[(api_version, kind, stem)] = r

    os.makedirs(opts.out, exist_ok=True)
    os.makedirs(os.path.join(opts.out, "standalone"), exist_ok=True)
    suffix = "" if opts.non_strict else "-strict"
    sizes = {}

    # ---- per-kind standalone files ------------------------------------------------
    union = set()
    for (api_version, kind, stem), r in roots.items():
        acc = set()
        refs_in(r, acc)
        names = closure(acc, all_defs)
        union |= names
        doc = {"$schema": DRAFT}
        doc.update(copy.deepcopy(r))
        doc["$defs"] = {n: rewrite(all_defs[n], opts) for n in sorted(names)}
        if opts.int_or_string_anyof:
            fix_int_or_string(doc["$defs"])
        p = os.path.join(opts.out, "standalone", stem + ".json")
        write(p, doc, opts)
        sizes[p] = (os.path.getsize(p), len(names))

    # ---- combined file ------------------------------------------------------------
    defs = {n: rewrite(all_defs[n], opts) for n in sorted(union)}
    if opts.int_or_string_anyof:
        fix_int_or_string(defs)
    for (api_version, kind, _), r in roots.items():
        defs[root_key(api_version, kind)] = r
    pairs = [(a, k) for a, k, _ in kinds]
    combined = {
        "$schema": DRAFT,
        "title": "Kubernetes v%s%s schemas for %s" % (opts.version, suffix, ", ".join(k for _, k in pairs)),
        "type": "object",
        "required": ["apiVersion", "kind"],
        # unknown apiVersion/kind pairs are rejected
        "anyOf": [{"properties": {"apiVersion": {"const": a}, "kind": {"const": k}}} for a, k in pairs],
        # dispatch to the right root
        "allOf": [
            {"if": {"properties": {"apiVersion": {"const": a}, "kind": {"const": k}},
                    "required": ["apiVersion", "kind"]},
             "then": {"$ref": "#/$defs/" + root_key(a, k)}}
            for a, k in pairs
        ],
        "$defs": defs,
    }
    p = os.path.join(opts.out, "k8s-v%s%s.json" % (opts.version.rsplit(".", 1)[0], suffix))
    write(p, combined, opts)
    sizes[p] = (os.path.getsize(p), len(union))
    return sizes


def write(path, doc, opts):
    with open(path, "w") as f:
        if opts.compact:
            json.dump(doc, f, separators=(",", ":"), sort_keys=False)
        else:
            json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel-dir", default="/tmp/research/k8s/wheel")
    ap.add_argument("--version", default="1.31.0")
    ap.add_argument("--out", default="/tmp/research/k8s/schemas")
    ap.add_argument("--non-strict", action="store_true", help="use v*-local instead of v*-local-strict")
    ap.add_argument("--strip-descriptions", action="store_true")
    ap.add_argument("--strip-x-kubernetes", action="store_true")
    ap.add_argument("--int-or-string-anyof", action="store_true")
    ap.add_argument("--require-apiversion-kind", action="store_true")
    ap.add_argument("--compact", action="store_true", help="no indentation")
    ap.add_argument("--kind", action="append", default=[], metavar="APIVERSION:KIND",
                    help="add a kind, e.g. networking.k8s.io/v1:Ingress (repeatable)")
    ap.add_argument("--only-listed-kinds", action="store_true",
                    help="use only the --kind entries, not the default seven")
    opts = ap.parse_args()
    extra = [tuple(k.rsplit(":", 1)) for k in opts.kind]
    opts.kinds = (extra if opts.only_listed_kinds else DEFAULT_KINDS + [k for k in extra if k not in DEFAULT_KINDS])
    for p, (size, n) in sorted(build(opts).items()):
        print("%9d bytes  %3d defs  %s" % (size, n, p))


if __name__ == "__main__":
    main()
