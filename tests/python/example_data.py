"""Makes TFRecord files of tf.Example records for the tests (messages from
proto/shardq/example.proto, compiled here with grpc_tools)."""
import importlib
import pathlib
import sys
import tempfile

from grpc_tools import protoc

import shardq

REPO = pathlib.Path(__file__).resolve().parents[2]
_pb2 = None


def example_pb2():
    global _pb2
    if _pb2 is None:
        # The module stays loaded once imported: its directory can go.
        with tempfile.TemporaryDirectory(prefix="shardq-example-pb-") as out:
            assert protoc.main(["protoc", f"-I{REPO}", f"--python_out={out}",
                                str(REPO / "proto" / "shardq" / "example.proto")]) == 0
            sys.path.insert(0, out)
            try:
                _pb2 = importlib.import_module("proto.shardq.example_pb2")
            finally:
                sys.path.remove(out)
    return _pb2


def make_example(label, width=784):
    pb = example_pb2()
    e = pb.Example()
    e.features.feature["x"].float_list.value.extend([label + i / 1000.0 for i in range(width)])
    e.features.feature["y"].int64_list.value.append(label)
    return e.SerializeToString()


def write_files(directory, files, per_file, width=784):
    """Files of tf.Examples whose labels 0..files*per_file-1 are unique."""
    paths = []
    for f in range(files):
        path = pathlib.Path(directory) / f"part-{f}.tfrecord"
        with shardq.TFRecordWriter(str(path)) as w:
            for r in range(per_file):
                w.write(make_example(f * per_file + r, width))
        paths.append(str(path))
    return paths
