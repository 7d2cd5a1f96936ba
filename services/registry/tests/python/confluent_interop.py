#!/usr/bin/env python3
"""Proves that the official Confluent Python client (confluent-kafka 2.16.1) works against
docflow's schema registry and broker, with no adaptation on the client side.

Run it with the venv from scripts/install-python-clients.sh (.tools/venv-confluent/bin/python).

Subcommands:

  registry --url URL --prefix P [--skip CHECK[,CHECK]]
      Drives every public method of confluent_kafka.schema_registry.SchemaRegistryClient that maps
      to a plain Schema Registry REST endpoint for AVRO schemas, on subjects named P-..., and
      asserts the results the way a Confluent registry answers (ids stable, versions increasing,
      soft/hard deletes, compatibility verdicts, schema references, Confluent error codes). It
      also round-trips records through AvroSerializer/AvroDeserializer without a broker. Every
      call starts with empty client caches, so each one reaches the registry. Subjects are
      deleted (soft, then permanently) at the end. `--list` prints the check names; `--skip`
      leaves checks out (e.g. `--skip mode` before the registry serves /mode, `--skip readonly`
      for a registry that is always READWRITE).

  produce --url URL --bootstrap HOST:PORT --topic T --subject S
      Reads JSON records from stdin (one per line), serializes each with AvroSerializer using
      the latest registered schema of S with auto.register.schemas=False and
      use.latest.version=True (the production setting: it must find the registered schema),
      produces them with confluent_kafka.Producer (key: the record's document_id, UTF-8),
      flushes, and prints `produced N`. timestamp-millis fields are given as int milliseconds.

  consume --url URL --bootstrap HOST:PORT --topic T --group G --count N [--subject S]
          [--timeout-s 60]
      Consumes N records from the beginning of T with confluent_kafka.Consumer, decodes each
      with a plain AvroDeserializer(client) and with use.latest.version=True (subject S,
      default T-value), checks the two agree, and prints each record as one JSON line
      (timestamps as int milliseconds, bytes as hex). Fails if fewer than N arrive in time.

Exit status 0 when everything held; otherwise a message on stderr naming the client call and
the exception (SchemaRegistryError with its HTTP status, error code and message) and status 1.
"""

import argparse
import datetime
import decimal
import json
import sys
import time
import traceback
import uuid

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.schema_registry_client import ConfigCompatibilityLevel, ServerConfig
from confluent_kafka.serialization import MessageField, SerializationContext

CLIENT_VERSION = "2.16.1"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class Failure(Exception):
    """A check did not hold; the message says which call and why."""


# ---------------------------------------------------------------------------------------------
# Reporting helpers


def describe(value):
    """Short repr for call labels: schemas by record name instead of their whole text."""
    if isinstance(value, Schema):
        try:
            parsed = json.loads(value.schema_str)
            name = parsed.get("name", parsed.get("type")) if isinstance(parsed, dict) else "union"
        except (TypeError, ValueError):
            name = "unparsable"
        return "Schema({}, {} refs)".format(name, len(value.references or []))
    if isinstance(value, ServerConfig):
        return "ServerConfig({})".format(value.to_dict())
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_error(e):
    if isinstance(e, SchemaRegistryError):
        return "SchemaRegistryError http_status_code={} error_code={} message={!r}".format(
            e.http_status_code, e.error_code, e.error_message
        )
    return "{}: {}".format(type(e).__name__, e)


def label(method, args, kwargs):
    parts = [describe(a) for a in args] + ["{}={}".format(k, describe(v)) for k, v in kwargs.items()]
    return "SchemaRegistryClient.{}({})".format(method, ", ".join(parts))


def expect(condition, message):
    if not condition:
        raise Failure(message)


def attempt(what, fn, *args, **kwargs):
    """Calls fn; any exception becomes a Failure naming `what`."""
    try:
        return fn(*args, **kwargs)
    except Failure:
        raise
    except Exception as e:  # noqa: BLE001 - reported with the call that raised it
        raise Failure("{} raised {}".format(what, describe_error(e))) from e


def to_jsonable(value):
    """Decoded Avro values as JSON: timestamps as int milliseconds, bytes as hex."""
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return (value - EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    return value


def schema_id_of(frame):
    """Schema id of a Confluent wire-format frame (magic byte 0, 4-byte big-endian id)."""
    expect(frame is not None and len(frame) > 5 and frame[0] == 0, "not a Confluent frame: {!r}".format(frame))
    return int.from_bytes(frame[1:5], "big")


# ---------------------------------------------------------------------------------------------
# Avro schemas used by the registry checks. Every record carries the prefix in its doc, so
# schema ids are not shared with runs under another prefix on the same registry.


def record(name, doc, fields):
    return {"type": "record", "name": name, "namespace": "io.docflow.test", "doc": doc, "fields": fields}


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


class Schemas:
    def __init__(self, prefix):
        doc = "docflow confluent interop, prefix {}".format(prefix)
        base = [
            {"name": "id", "type": "string"},
            {"name": "n", "type": "long"},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ]
        note = {"name": "note", "type": ["null", "string"], "default": None}
        extra = {"name": "extra", "type": ["null", "long"], "default": None}
        required = {"name": "required_x", "type": "string"}
        self.thing_v1_obj = record("Thing", doc, base)
        self.thing_v1 = Schema(compact(self.thing_v1_obj), "AVRO")
        # The same schema, pretty-printed: a registry must treat it as the same schema.
        self.thing_v1_pretty = Schema(json.dumps(self.thing_v1_obj, indent=2), "AVRO")
        self.thing_v2_obj = record("Thing", doc, base + [note])
        self.thing_v2 = Schema(compact(self.thing_v2_obj), "AVRO")
        # Backward compatible with v1 and v2: one more optional field.
        self.thing_compatible = Schema(compact(record("Thing", doc, base + [note, extra])), "AVRO")
        # Not backward compatible: a new field without a default.
        self.thing_incompatible = Schema(compact(record("Thing", doc, base + [note, required])), "AVRO")
        self.unregistered = Schema(compact(record("Unregistered", doc, [{"name": "x", "type": "int"}])), "AVRO")

        self.address_obj = record(
            "Address", doc, [{"name": "street", "type": "string"}, {"name": "city", "type": "string"}]
        )
        self.address = Schema(compact(self.address_obj), "AVRO")
        person_fields = [{"name": "name", "type": "string"}, {"name": "address", "type": "io.docflow.test.Address"}]
        self.person_obj = record("Person", doc, person_fields)
        email = {"name": "email", "type": ["null", "string"], "default": None}
        age = {"name": "age", "type": "int"}
        self.person_compatible_obj = record("Person", doc, person_fields + [email])
        self.person_incompatible_obj = record("Person", doc, person_fields + [age])


# ---------------------------------------------------------------------------------------------
# registry subcommand

# Check names, in the order they run (most are named after the client method they drive), and
# groups of them for --skip.
CHECKS = """
    schema_types config_global register_schema register_schema_full_response normalize get_schema
    get_subjects subject_prefix get_versions pagination get_version get_latest_version lookup_schema
    config_subject test_compatibility test_compatibility_all_versions set_config ci_gate references
    get_referenced_by reference_delete_guard serde serde_references schema_ids delete_version
    delete_subject get_global_mode update_global_mode update_mode get_mode mode_readonly_enforced
    delete_mode cleanup
""".split()
GROUPS = {
    "mode": "get_global_mode update_global_mode update_mode get_mode mode_readonly_enforced delete_mode".split(),
    "set_mode": ["update_mode", "update_global_mode"],  # 2.16.1 names it update_mode
    # Subject-level modes other than READWRITE (for a registry that is always READWRITE).
    "readonly": ["update_mode", "mode_readonly_enforced", "delete_mode"],
}
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")


class RegistryRun:
    def __init__(self, url, prefix, skip):
        self.client = SchemaRegistryClient({"url": url})
        self.prefix = prefix
        self.skip = skip
        self.check = None
        self.s = Schemas(prefix)
        self.created = []  # subjects this run registered under, deleted at the end
        self.subject = prefix + "-thing-value"  # v1 and v2 of Thing
        self.other = prefix + "-other-value"  # v1 of Thing again: ids are global
        self.norm = prefix + "-norm-value"  # v1 registered with normalize=True
        self.empty = prefix + "-empty-value"  # never registered
        self.address = prefix + "-address"  # the referenced record
        self.person = prefix + "-person-value"  # references the address
        self.dele = prefix + "-del-value"  # soft and hard deletes
        self.ref = SchemaReference(name="io.docflow.test.Address", subject=self.address, version=1)

    # -- calling the client --

    def call(self, method, *args, **kwargs):
        """One client call, with empty caches so that it reaches the registry."""
        self.client.clear_caches()
        return attempt(label(method, args, kwargs), getattr(self.client, method), *args, **kwargs)

    def returns(self, want, method, *args, **kwargs):
        """A client call that must return `want`."""
        got = self.call(method, *args, **kwargs)
        expect(got == want, "{} returned {!r}, expected {!r}".format(label(method, args, kwargs), got, want))
        return got

    def returns_registered(self, want, method, *args, **kwargs):
        """A client call that must return a RegisteredSchema with (subject, version, id) `want`."""
        rs = self.call(method, *args, **kwargs)
        got = (rs.subject, rs.version, rs.schema_id)
        expect(
            got == want,
            "{} returned (subject, version, id) {!r}, expected {!r}".format(label(method, args, kwargs), got, want),
        )
        return rs

    def fails(self, status, code, method, *args, **kwargs):
        """A client call that must fail with this HTTP status and Confluent error code (or one of
        a tuple of codes)."""
        self.client.clear_caches()
        codes = code if isinstance(code, tuple) else (code,)
        want = "HTTP {} error_code {}".format(status, " or ".join(str(c) for c in codes))
        what = label(method, args, kwargs)
        try:
            result = getattr(self.client, method)(*args, **kwargs)
        except SchemaRegistryError as e:
            expect(
                e.http_status_code == status and e.error_code in codes,
                "{} should fail with {}, got {}".format(what, want, describe_error(e)),
            )
            return
        except Exception as e:  # noqa: BLE001
            raise Failure("{} should fail with {}, raised {}".format(what, want, describe_error(e))) from e
        raise Failure("{} should fail with {}, returned {!r}".format(what, want, result))

    def same_schema(self, what, got, want):
        """Same Avro schema and references; the schema text is compared as JSON, so the registry
        may reformat it."""
        try:
            got_obj = json.loads(got.schema_str)
        except (TypeError, ValueError) as e:
            raise Failure("{}: schema is not JSON: {!r} ({})".format(what, got.schema_str, e)) from e
        want_obj = json.loads(want.schema_str)
        expect(got_obj == want_obj, "{}: schema {!r}, expected {!r}".format(what, got.schema_str, want.schema_str))
        expect(got.schema_type == "AVRO", "{}: schemaType {!r}, expected AVRO".format(what, got.schema_type))
        expect(
            got.references == want.references,
            "{}: references {!r}, expected {!r}".format(what, got.references, want.references),
        )

    def register(self, subject, schema, **kwargs):
        if subject not in self.created:
            self.created.append(subject)
        return self.call("register_schema", subject, schema, **kwargs)

    def our_subjects(self, subjects):
        return sorted(s for s in subjects if s.startswith(self.prefix + "-"))

    # -- the checks, in order --

    def run(self):
        existing = self.our_subjects(self.call("get_subjects", deleted=True))
        expect(
            not existing,
            "subjects with prefix {!r} exist already: {}; use a fresh --prefix".format(self.prefix, existing),
        )
        passed, skipped = [], []
        for name in CHECKS:
            if name in self.skip:
                skipped.append(name)
                continue
            self.check = name
            getattr(self, "check_" + name)()
            passed.append(name)
            print("ok   " + name, flush=True)
        self.check = None
        print("registry: {} checks passed{}".format(len(passed), "; skipped: " + ",".join(skipped) if skipped else ""))

    def cleanup_after_failure(self):
        """Best effort after a failed check: remove the subjects this run created."""
        for subject in sorted(self.created, key=lambda x: x != self.person):  # the referrer first
            for permanent in (False, True):
                try:
                    self.client.delete_subject(subject, permanent=permanent)
                except Exception:  # noqa: BLE001 - best effort
                    pass

    def check_schema_types(self):
        types = self.call("get_schema_types")
        expect(isinstance(types, list) and "AVRO" in types, "get_schema_types() returned {!r}".format(types))

    def check_config_global(self):
        level = self.call("get_compatibility")
        expect(level in LEVELS, "get_compatibility() returned {!r}, not a compatibility level".format(level))
        # Set it to what it is already: harmless to runs in parallel on the same registry.
        self.returns({"compatibility": level}, "set_compatibility", level=level)
        got = self.call("get_config").compatibility_level
        expect(got == level, "get_config().compatibility_level is {!r}, expected {!r}".format(got, level))
        config = ServerConfig(compatibility=ConfigCompatibilityLevel(level))
        self.returns({"compatibility": level}, "set_config", config=config)

    def check_register_schema(self):
        s = self.s
        self.id1 = self.register(self.subject, s.thing_v1)
        expect(isinstance(self.id1, int) and self.id1 > 0, "register_schema returned id {!r}".format(self.id1))
        got = self.register(self.subject, s.thing_v1)
        expect(got == self.id1, "registering v1 again returned id {}, expected the same id {}".format(got, self.id1))
        self.id2 = self.register(self.subject, s.thing_v2)
        expect(self.id2 != self.id1, "registering v2 returned v1's id {}".format(self.id1))
        got = self.register(self.other, s.thing_v1)
        expect(got == self.id1, "v1 under another subject got id {}, expected v1's id {}".format(got, self.id1))
        # Confluent answers HTTP 409 to an incompatible schema (error_code 409; 40901 in newer
        # releases).
        self.call("set_compatibility", self.subject, "BACKWARD")
        self.fails(409, (409, 40901), "register_schema", self.subject, s.thing_incompatible)
        self.call("delete_config", self.subject)

    def check_register_schema_full_response(self):
        rs = self.call("register_schema_full_response", self.subject, self.s.thing_v2)
        expect(
            rs.schema_id == self.id2 and rs.version in (None, 2),
            "register_schema_full_response(v2 again) returned id {}, version {}; expected {}, 2 (or no version)".format(
                rs.schema_id, rs.version, self.id2
            ),
        )

    def check_normalize(self):
        s = self.s
        got = self.register(self.norm, s.thing_v1_pretty, normalize_schemas=True)
        expect(got == self.id1, "pretty-printed v1 with normalize got id {}, expected v1's id {}".format(got, self.id1))
        self.returns_registered(
            (self.norm, 1, self.id1), "lookup_schema", self.norm, s.thing_v1_pretty, normalize_schemas=True
        )

    def check_get_schema(self):
        s = self.s
        self.same_schema("get_schema(id1)", self.call("get_schema", self.id1), s.thing_v1)
        self.same_schema("get_schema(id2)", self.call("get_schema", self.id2), s.thing_v2)
        got = self.call("get_schema", self.id1, subject_name=self.subject)
        self.same_schema("get_schema(id1, subject_name)", got, s.thing_v1)
        got = self.call("get_schema", self.id1, subject_name=self.subject, fmt="resolved")
        self.same_schema("get_schema(id1, subject_name, fmt='resolved')", got, s.thing_v1)
        self.fails(404, 40403, "get_schema", 2_000_000_000)

    def check_get_subjects(self):
        got = self.our_subjects(self.call("get_subjects"))
        want = sorted([self.subject, self.other, self.norm])
        expect(got == want, "get_subjects() lists {} with our prefix, expected {}".format(got, want))

    def check_subject_prefix(self):
        got = sorted(self.call("get_subjects", subject_prefix=self.prefix + "-"))
        want = sorted([self.subject, self.other, self.norm])
        expect(
            got == want,
            "get_subjects(subject_prefix={!r}) returned {}, expected {}".format(self.prefix + "-", got, want),
        )

    def check_get_versions(self):
        self.returns([1, 2], "get_versions", self.subject)
        self.fails(404, 40401, "get_versions", self.empty)

    def check_pagination(self):
        self.returns([2], "get_versions", self.subject, offset=1, limit=1)
        self.returns([1], "get_versions", self.subject, offset=0, limit=1)

    def check_get_version(self):
        s = self.s
        rs = self.returns_registered((self.subject, 1, self.id1), "get_version", self.subject, 1)
        self.same_schema("get_version(S, 1)", rs.schema, s.thing_v1)
        rs = self.returns_registered((self.subject, 2, self.id2), "get_version", self.subject, "latest")
        self.same_schema("get_version(S, 'latest')", rs.schema, s.thing_v2)
        self.returns_registered((self.subject, 2, self.id2), "get_version", self.subject, 2, deleted=True)
        self.fails(404, 40402, "get_version", self.subject, 3)
        self.fails(404, 40401, "get_version", self.empty, 1)

    def check_get_latest_version(self):
        rs = self.returns_registered((self.subject, 2, self.id2), "get_latest_version", self.subject)
        self.same_schema("get_latest_version(S)", rs.schema, self.s.thing_v2)
        self.fails(404, 40401, "get_latest_version", self.empty)

    def check_lookup_schema(self):
        s, subject = self.s, self.subject
        # POST /subjects/S?normalize=False&deleted=False: capitalised booleans.
        self.returns_registered((subject, 1, self.id1), "lookup_schema", subject, s.thing_v1)
        self.returns_registered((subject, 2, self.id2), "lookup_schema", subject, s.thing_v2)
        self.returns_registered((subject, 1, self.id1), "lookup_schema", subject, s.thing_v1_pretty)
        self.returns_registered((subject, 1, self.id1), "lookup_schema", subject, s.thing_v1, deleted=True)
        self.fails(404, 40403, "lookup_schema", subject, s.unregistered)
        self.fails(404, 40401, "lookup_schema", self.empty, s.thing_v1)

    def check_config_subject(self):
        self.fails(404, 40408, "get_compatibility", self.subject)
        self.returns({"compatibility": "BACKWARD"}, "set_compatibility", self.subject, "BACKWARD")
        self.returns("BACKWARD", "get_compatibility", self.subject)
        got = self.call("get_config", self.subject).compatibility_level
        expect(got == "BACKWARD", "get_config(S).compatibility_level is {!r}, expected BACKWARD".format(got))

    def check_test_compatibility(self):
        s, subject = self.s, self.subject
        self.call("set_compatibility", subject, "BACKWARD")
        self.returns(True, "test_compatibility", subject, s.thing_compatible)
        self.returns(True, "test_compatibility", subject, s.thing_compatible, version=1)
        self.returns(False, "test_compatibility", subject, s.thing_incompatible)
        self.returns(False, "test_compatibility", subject, s.thing_incompatible, version=1)
        self.returns(False, "test_compatibility", subject, s.thing_incompatible, version="latest", verbose=True)
        self.returns(True, "test_compatibility", subject, s.thing_compatible, normalize=True)
        self.fails(404, 40402, "test_compatibility", subject, s.thing_compatible, version=7)

    def check_test_compatibility_all_versions(self):
        s, subject = self.s, self.subject
        self.call("set_compatibility", subject, "BACKWARD")
        self.returns(True, "test_compatibility_all_versions", subject, s.thing_compatible)
        self.returns(False, "test_compatibility_all_versions", subject, s.thing_incompatible)

    def check_set_config(self):
        subject = self.subject
        self.returns(
            {"compatibility": "NONE"}, "set_config", subject, ServerConfig(compatibility=ConfigCompatibilityLevel.NONE)
        )
        self.returns("NONE", "get_compatibility", subject)
        # The subject's level is honoured: under NONE anything goes.
        self.returns(True, "test_compatibility", subject, self.s.thing_incompatible)
        deleted = self.call("delete_config", subject)
        removed = deleted.compatibility_level or deleted.compatibility
        expect(removed == "NONE", "delete_config(S) returned {!r}, expected the removed level NONE".format(deleted))
        self.fails(404, 40408, "get_compatibility", subject)
        # Confluent's DELETE /config/{subject} answers 40401 when the subject has no level.
        self.fails(404, 40401, "delete_config", subject)

    def check_ci_gate(self):
        # A CI gate tests a schema before its subject exists: Confluent answers compatible.
        self.returns(True, "test_compatibility", self.empty, self.s.thing_v1)
        self.returns(True, "test_compatibility_all_versions", self.empty, self.s.thing_v1)
        expect(
            self.empty not in self.call("get_subjects", deleted=True),
            "test_compatibility created the subject {}".format(self.empty),
        )

    def person_schema(self, obj, refs=True):
        return Schema(compact(obj), "AVRO", [self.ref] if refs else [])

    def check_references(self):
        s, person = self.s, self.person
        person_v1 = self.person_schema(s.person_obj)
        self.address_id = self.register(self.address, s.address)
        self.returns_registered((self.address, 1, self.address_id), "get_version", self.address, 1)
        # Without its reference the Person schema does not parse: 422 / 42201.
        self.fails(422, 42201, "register_schema", person, self.person_schema(s.person_obj, refs=False))
        self.person_id = self.register(person, person_v1)
        got = self.register(person, person_v1)
        expect(
            got == self.person_id, "registering person again returned id {}, expected {}".format(got, self.person_id)
        )
        # The references come back from every read.
        self.same_schema("get_schema(person id)", self.call("get_schema", self.person_id), person_v1)
        got = self.call("get_schema", self.person_id, subject_name=person)
        self.same_schema("get_schema(person id, subject_name)", got, person_v1)
        rs = self.returns_registered((person, 1, self.person_id), "get_version", person, 1)
        self.same_schema("get_version(person, 1)", rs.schema, person_v1)
        rs = self.returns_registered((person, 1, self.person_id), "get_latest_version", person)
        self.same_schema("get_latest_version(person)", rs.schema, person_v1)
        self.returns_registered((person, 1, self.person_id), "lookup_schema", person, person_v1)
        self.call("set_compatibility", person, "BACKWARD")
        self.returns(True, "test_compatibility", person, self.person_schema(s.person_compatible_obj))
        self.returns(False, "test_compatibility", person, self.person_schema(s.person_incompatible_obj))
        self.returns(True, "test_compatibility_all_versions", person, self.person_schema(s.person_compatible_obj))

    def check_get_referenced_by(self):
        self.returns([self.person_id], "get_referenced_by", self.address, 1)
        self.returns([self.person_id], "get_referenced_by", self.address)
        self.returns([], "get_referenced_by", self.subject, 1)

    def check_reference_delete_guard(self):
        # A referenced schema cannot be deleted: 422 / 42206.
        self.fails(422, 42206, "delete_version", self.address, 1)
        self.fails(422, 42206, "delete_subject", self.address)

    def serde_round_trip(self, subject, value, writer_id, latest_obj, serializer):
        """Serialize with `serializer`, then decode plainly and with use.latest.version=True."""
        # The default subject strategy (GET /associations/..., on 404 TOPIC-value) maps it back.
        topic = subject[: -len("-value")]
        ctx = SerializationContext(topic, MessageField.VALUE)
        frame = attempt("AvroSerializer(subject {})".format(subject), serializer, value, ctx)
        got = schema_id_of(frame)
        expect(got == writer_id, "AvroSerializer wrote schema id {}, expected {}".format(got, writer_id))
        decoded = {}
        for name, conf in (("plain", None), ("use.latest.version", {"use.latest.version": True})):
            self.client.clear_caches()
            deserializer = AvroDeserializer(self.client, conf=conf)
            decoded[name] = to_jsonable(attempt("AvroDeserializer({})".format(name), deserializer, frame, ctx))
        # The latest schema reads what an older one wrote, filling the new fields' defaults.
        latest = {f["name"]: value.get(f["name"], f.get("default")) for f in latest_obj["fields"]}
        for name, want in (("plain", value), ("use.latest.version", latest)):
            got = decoded[name]
            expect(
                got == want and list(got) == list(want),
                "AvroDeserializer({}) of subject {} decoded {!r}, expected {!r}".format(name, subject, got, want),
            )

    def latest_serializer(self, subject):
        """The production setting: no auto-registration, write with the latest registered schema."""
        latest = self.call("get_latest_version", subject)
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        return attempt(
            "AvroSerializer(latest schema of {})".format(subject),
            AvroSerializer,
            self.client,
            schema_str=latest.schema,
            conf=conf,
        )

    def check_serde(self):
        s = self.s
        v2 = {"id": "doc-1", "n": 42, "at": 1700000000123, "note": "hi"}
        self.serde_round_trip(self.subject, v2, self.id2, s.thing_v2_obj, self.latest_serializer(self.subject))
        # auto.register.schemas=False with a given schema: the serializer looks it up
        # (POST /subjects/S?normalize=False&deleted=False) and writes its id.
        self.client.clear_caches()
        by_lookup = AvroSerializer(self.client, schema_str=s.thing_v1.schema_str, conf={"auto.register.schemas": False})
        v1 = {"id": "doc-2", "n": -1, "at": 0}
        self.serde_round_trip(self.subject, v1, self.id1, s.thing_v2_obj, by_lookup)
        # A schema that is not registered is refused, not registered.
        self.client.clear_caches()
        refused = AvroSerializer(
            self.client, schema_str=s.unregistered.schema_str, conf={"auto.register.schemas": False}
        )
        try:
            refused({"x": 1}, SerializationContext(self.subject[: -len("-value")], MessageField.VALUE))
        except SchemaRegistryError as e:
            expect(
                (e.http_status_code, e.error_code) == (404, 40403),
                "AvroSerializer of an unregistered schema: expected HTTP 404 error_code 40403, got "
                + describe_error(e),
            )
        else:
            raise Failure("AvroSerializer(auto.register.schemas=False) wrote with an unregistered schema")

    def check_serde_references(self):
        value = {"name": "Ada", "address": {"street": "1 Main St", "city": "Zurich"}}
        self.serde_round_trip(
            self.person, value, self.person_id, self.s.person_obj, self.latest_serializer(self.person)
        )

    def versions_of(self, schema_id, **kwargs):
        return sorted((v.subject, v.version) for v in self.call("get_schema_versions", schema_id, **kwargs))

    def check_schema_ids(self):
        got, want = self.versions_of(self.id1), sorted([(self.subject, 1), (self.other, 1), (self.norm, 1)])
        expect(got == want, "get_schema_versions(id1) returned {}, expected {}".format(got, want))
        got = self.versions_of(self.person_id)
        expect(got == [(self.person, 1)], "get_schema_versions(person id) returned {}".format(got))
        got, want = sorted(self.call("get_subjects_by_schema_id", self.id1)), sorted(
            [self.subject, self.other, self.norm]
        )
        expect(got == want, "get_subjects_by_schema_id(id1) returned {}, expected {}".format(got, want))
        self.returns([self.subject], "get_subjects_by_schema_id", self.id2)
        self.fails(404, 40403, "get_schema_versions", 2_000_000_000)
        self.fails(404, 40403, "get_subjects_by_schema_id", 2_000_000_000)

    def check_delete_version(self):
        s, d = self.s, self.dele
        expect(self.register(d, s.thing_v1) == self.id1, "registering v1 under {} changed its id".format(d))
        expect(self.register(d, s.thing_v2) == self.id2, "registering v2 under {} changed its id".format(d))
        self.returns([1, 2], "get_versions", d)
        self.returns(1, "delete_version", d, 1)
        self.returns([2], "get_versions", d)
        self.returns([1, 2], "get_versions", d, deleted=True)
        self.fails(404, 40402, "get_version", d, 1)
        self.returns_registered((d, 1, self.id1), "get_version", d, 1, deleted=True)
        self.fails(404, 40403, "lookup_schema", d, s.thing_v1)
        self.returns_registered((d, 1, self.id1), "lookup_schema", d, s.thing_v1, deleted=True)
        expect(
            (d, 1) not in self.versions_of(self.id1), "get_schema_versions(id1) lists the soft-deleted {} v1".format(d)
        )
        expect(
            (d, 1) in self.versions_of(self.id1, deleted=True),
            "get_schema_versions(id1, deleted=True) misses {} v1".format(d),
        )
        expect(
            d not in self.call("get_subjects_by_schema_id", self.id1),
            "get_subjects_by_schema_id(id1) lists {}".format(d),
        )
        expect(
            d in self.call("get_subjects_by_schema_id", self.id1, deleted=True),
            "get_subjects_by_schema_id(id1, deleted=True) misses {}".format(d),
        )
        self.fails(404, 40406, "delete_version", d, 1)
        self.fails(404, 40407, "delete_version", d, 2, permanent=True)
        self.returns(1, "delete_version", d, 1, permanent=True)
        self.returns([2], "get_versions", d, deleted=True)
        self.fails(404, 40402, "get_version", d, 1, deleted=True)
        self.returns_registered((d, 2, self.id2), "get_latest_version", d)

    def check_delete_subject(self):
        d = self.dele
        self.returns([2], "delete_subject", d)
        expect(d not in self.call("get_subjects"), "get_subjects() lists the soft-deleted {}".format(d))
        expect(d in self.call("get_subjects", deleted=True), "get_subjects(deleted=True) misses {}".format(d))
        self.fails(404, 40401, "get_versions", d)
        self.returns([2], "get_versions", d, deleted=True)
        self.fails(404, 40401, "get_latest_version", d)
        self.fails(404, 40404, "delete_subject", d)
        self.fails(404, 40405, "delete_subject", self.other, permanent=True)
        self.returns([2], "delete_subject", d, permanent=True)
        expect(
            d not in self.call("get_subjects", deleted=True),
            "get_subjects(deleted=True) lists the deleted {}".format(d),
        )
        self.fails(404, 40401, "get_versions", d, deleted=True)
        self.created.remove(d)

    def check_get_global_mode(self):
        self.global_mode = self.call("get_global_mode")
        expect(self.global_mode in MODES, "get_global_mode() returned {!r}".format(self.global_mode))

    def check_update_global_mode(self):
        mode = getattr(self, "global_mode", "READWRITE")
        # Set it to what it is already: harmless to runs in parallel.
        self.returns(mode, "update_global_mode", mode)

    def check_update_mode(self):
        self.returns("READONLY", "update_mode", self.other, "READONLY")

    def check_get_mode(self):
        if "update_mode" not in self.skip:
            self.returns("READONLY", "get_mode", self.other)
            return
        # No subject-level mode was set: Confluent answers 404 / 40409; a registry with only a
        # global mode may answer that one.
        self.client.clear_caches()
        try:
            mode = self.client.get_mode(self.other)
        except SchemaRegistryError as e:
            expect(
                (e.http_status_code, e.error_code) == (404, 40409),
                "SchemaRegistryClient.get_mode({!r}) raised {}".format(self.other, describe_error(e)),
            )
        else:
            expect(mode in MODES, "SchemaRegistryClient.get_mode({!r}) returned {!r}".format(self.other, mode))

    def check_mode_readonly_enforced(self):
        self.fails(422, 42205, "register_schema", self.other, self.s.thing_v2)

    def check_delete_mode(self):
        self.returns("READONLY", "delete_mode", self.other)  # the removed mode
        self.fails(404, 40409, "get_mode", self.other)
        got = self.register(self.other, self.s.thing_v1)  # writable again
        expect(got == self.id1, "register_schema after delete_mode returned {}, expected {}".format(got, self.id1))

    def check_cleanup(self):
        for subject in sorted(self.created, key=lambda x: x != self.person):  # the referrer first
            versions = self.call("delete_subject", subject)
            expect(
                isinstance(versions, list) and versions, "delete_subject({!r}) returned {!r}".format(subject, versions)
            )
            self.returns(versions, "delete_subject", subject, permanent=True)
        left = self.our_subjects(self.call("get_subjects", deleted=True))
        expect(not left, "subjects left after deleting them all: {}".format(left))
        self.created = []


def cmd_registry(args):
    run = RegistryRun(args.url, args.prefix, args.skip)
    try:
        run.run()
    except Failure as e:
        print("FAIL [{}] {}".format(run.check or "setup", e), file=sys.stderr)
        run.cleanup_after_failure()
        return 1
    except Exception:  # a bug in this script rather than in the registry
        print("FAIL [{}] unexpected error:\n{}".format(run.check or "setup", traceback.format_exc()), file=sys.stderr)
        run.cleanup_after_failure()
        return 1
    finally:
        run.client.close()
    return 0


# ---------------------------------------------------------------------------------------------
# produce / consume subcommands


def fixed_subject(subject):
    """A subject.name.strategy that always answers `subject`."""
    return lambda ctx, record_name: subject


def cmd_produce(args):
    client = SchemaRegistryClient({"url": args.url})
    latest = attempt(
        "SchemaRegistryClient.get_latest_version({!r})".format(args.subject), client.get_latest_version, args.subject
    )
    conf = {
        "auto.register.schemas": False,
        "use.latest.version": True,
        "subject.name.strategy": fixed_subject(args.subject),
    }
    # latest.schema is a Schema, so that its references come along.
    serializer = attempt(
        "AvroSerializer(latest schema of {})".format(args.subject),
        AvroSerializer,
        client,
        schema_str=latest.schema,
        conf=conf,
    )
    producer = Producer({"bootstrap.servers": args.bootstrap})
    failed = []

    def delivered(err, msg):
        if err is not None:
            failed.append("{} [{}]: {}".format(msg.topic(), msg.partition(), err))

    ctx = SerializationContext(args.topic, MessageField.VALUE)
    count = 0
    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        value = attempt("json.loads(stdin line {})".format(lineno), json.loads, line)
        frame = attempt(
            "AvroSerializer(subject {}) of stdin line {}".format(args.subject, lineno), serializer, value, ctx
        )
        key = value.get("document_id") if isinstance(value, dict) else None
        key = key.encode("utf-8") if isinstance(key, str) else None
        while True:
            try:
                producer.produce(args.topic, key=key, value=frame, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
            except Exception as e:  # noqa: BLE001
                raise Failure("Producer.produce(topic {}) raised {}".format(args.topic, describe_error(e))) from e
        producer.poll(0)
        count += 1
    left = producer.flush(args.timeout_s)
    expect(left == 0, "Producer.flush({}s): {} records still undelivered".format(args.timeout_s, left))
    expect(not failed, "Producer delivery failed for {} records: {}".format(len(failed), "; ".join(failed[:5])))
    client.close()
    print("produced {}".format(count))
    return 0


def cmd_consume(args):
    subject = args.subject or args.topic + "-value"
    client = SchemaRegistryClient({"url": args.url})
    latest_id = attempt(
        "SchemaRegistryClient.get_latest_version({!r})".format(subject), client.get_latest_version, subject
    ).schema_id
    deserializers = {
        # The default subject strategy: it asks GET /associations/... first and, on 404, uses TOPIC-value.
        "plain": AvroDeserializer(client),
        "use.latest.version": AvroDeserializer(
            client, conf={"use.latest.version": True, "subject.name.strategy": fixed_subject(subject)}
        ),
    }
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "auto.offset.reset": "earliest"})
    consumer.subscribe([args.topic])
    deadline = time.monotonic() + args.timeout_s
    got, last_error = 0, None
    try:
        while got < args.count and time.monotonic() < deadline:
            msg = consumer.poll(min(1.0, max(0.0, deadline - time.monotonic())))
            if msg is None:
                continue
            if msg.error() is not None:
                expect(not msg.error().fatal(), "Consumer.poll() returned a fatal error: {}".format(msg.error()))
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    last_error = msg.error()  # e.g. the topic does not exist yet; keep polling
                continue
            ctx = SerializationContext(msg.topic(), MessageField.VALUE, msg.headers())
            where = "{} [{}] @{}".format(msg.topic(), msg.partition(), msg.offset())
            plain, latest = (
                to_jsonable(attempt("AvroDeserializer({}) of {}".format(name, where), d, msg.value(), ctx))
                for name, d in deserializers.items()
            )
            if schema_id_of(msg.value()) == latest_id:
                agree = plain == latest
            else:  # written with an older schema: the latest one may add fields with their defaults
                agree = all(latest.get(k) == v for k, v in plain.items() if k in latest)
            expect(
                agree,
                "{}: the deserializers disagree: plain {!r}, use.latest.version {!r}".format(where, plain, latest),
            )
            print(json.dumps(plain), flush=True)
            got += 1
    finally:
        consumer.close()
        client.close()
    expect(
        got >= args.count,
        "Consumer: {} of {} records from {} in {}s{}".format(
            got, args.count, args.topic, args.timeout_s, " (last error: {})".format(last_error) if last_error else ""
        ),
    )
    return 0


# ---------------------------------------------------------------------------------------------


def skip_list(text):
    names = []
    for name in filter(None, (n.strip() for n in text.split(","))):
        if name in GROUPS:
            names.extend(GROUPS[name])
        elif name in CHECKS:
            names.append(name)
        else:
            raise argparse.ArgumentTypeError(
                "unknown check {!r}; checks: {}; groups: {}".format(name, ", ".join(CHECKS), ", ".join(GROUPS))
            )
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("registry", help="drive every SchemaRegistryClient REST method against the registry")
    p.add_argument("--url", required=True, help="registry base URL, e.g. http://127.0.0.1:8081")
    p.add_argument("--prefix", help="subject prefix, unique per run (subjects are PREFIX-...)")
    p.add_argument(
        "--skip",
        action="append",
        type=skip_list,
        default=[],
        metavar="CHECK[,CHECK]",
        help="leave checks out (repeatable); see --list; 'mode' names all mode checks",
    )
    p.add_argument("--list", action="store_true", help="print the check names and exit")

    p = sub.add_parser("produce", help="serialize JSON lines from stdin with AvroSerializer and produce them")
    p.add_argument("--url", required=True)
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    p.add_argument("--topic", required=True)
    p.add_argument("--subject", required=True, help="subject whose latest schema writes the records")
    p.add_argument("--timeout-s", type=float, default=60.0, help="flush timeout (default 60)")

    p = sub.add_parser("consume", help="consume N records and decode them with AvroDeserializer")
    p.add_argument("--url", required=True)
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--count", required=True, type=int)
    p.add_argument("--subject", help="subject for use.latest.version (default TOPIC-value)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="how long to wait for COUNT records (default 60)")

    args = parser.parse_args(argv)
    if confluent_kafka.__version__ != CLIENT_VERSION:
        print(
            "warning: confluent-kafka {} is not the {} this script was written against".format(
                confluent_kafka.__version__, CLIENT_VERSION
            ),
            file=sys.stderr,
        )
    if args.command == "registry":
        if args.list:
            print("\n".join(CHECKS))
            print("groups: " + "; ".join("{} = {}".format(k, ",".join(v)) for k, v in GROUPS.items()))
            return 0
        if not args.prefix:
            parser.error("registry: --prefix is required")
        args.skip = {name for names in args.skip for name in names}
    try:
        return {"registry": cmd_registry, "produce": cmd_produce, "consume": cmd_consume}[args.command](args)
    except Failure as e:
        print("FAIL {}".format(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
