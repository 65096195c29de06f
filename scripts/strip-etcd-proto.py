#!/usr/bin/env python3
"""Copies etcd's API .proto files without the options that only its Go code generators read.

etcd's rpc.proto imports grpc-gateway's and googleapis' annotation files and its own versionpb
options; a client needs none of them, and leaving them out means the generator needs no file
beyond etcd's own three. Everything else (messages, fields, numbers, services, comments) is
copied unchanged.

Usage: strip-etcd-proto.py <etcd api module dir> <out proto root>
"""
import pathlib
import re
import sys

FILES = ["etcdserverpb/rpc.proto", "mvccpb/kv.proto", "authpb/auth.proto"]
DROPPED_IMPORTS = ("google/api/", "protoc-gen-openapiv2/", "etcd/api/versionpb/", "gogoproto/")


def strip(text: str) -> str:
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("import ") and any(d in stripped for d in DROPPED_IMPORTS):
            i += 1
            continue
        if stripped.startswith("// for grpc-gateway"):
            i += 1
            continue
        # A custom option: `option (x.y) = "v";` or a `{ ... };` block over several lines.
        if re.match(r"option\s*\(", stripped):
            depth = stripped.count("{") - stripped.count("}")
            while depth > 0 or not lines[i].rstrip().endswith(";"):
                i += 1
                depth += lines[i].count("{") - lines[i].count("}")
            i += 1
            continue
        # Custom field options: `int64 x = 10 [(versionpb.etcd_version_field)="3.1"];`.
        line = re.sub(r"\s*\[\([a-z_.]+\)\s*=\s*\"[^\"]*\"\]", "", line)
        out.append(line)
        i += 1
    # A service method left with an empty body reads as `rpc X(A) returns (B) {}`.
    joined = "\n".join(out) + "\n"
    joined = re.sub(r"\{\n\s*\}", "{}", joined)
    return re.sub(r"\n{3,}", "\n\n", joined)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    for name in FILES:
        target = dst / "etcd" / "api" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(strip((src / name).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
