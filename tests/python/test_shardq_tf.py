"""shardq.tf without TensorFlow: the module imports, and its functions
raise an ImportError naming what to install. With a stand-in for tf.data
(the real TensorFlow is checked by bench/interop/run), input_dataset and
dataset hand every item and record of every epoch to it once."""
import collections
import sys
import types

import pytest

import shardq
import shardq.tf


def test_shardq_tf_imports_without_tensorflow_and_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow fails
    p = tmp_path / "a.txt"
    p.write_text("x\n")
    queue = shardq.WorkQueue([str(p)], name="tf-missing")
    with pytest.raises(ImportError, match="pip install tensorflow"):
        shardq.tf.input_dataset(queue)
    with pytest.raises(ImportError, match="pip install tensorflow"):
        shardq.tf.dataset(queue, reader="text")
    assert shardq.tf.data.WorkQueue is shardq.tf.WorkQueue


@pytest.fixture
def fake_tf(monkeypatch):
    """tf.data.Dataset.from_generator and tf.TensorSpec, as far as used."""
    class Dataset:
        def __init__(self, generator, output_signature):
            self.generator, self.signature = generator, output_signature

        @classmethod
        def from_generator(cls, generator, output_signature):
            return cls(generator, output_signature)

        def __iter__(self):
            return iter(self.generator())
    tf = types.SimpleNamespace(string="string", TensorSpec=lambda shape, dtype: (shape, dtype),
                               data=types.SimpleNamespace(Dataset=Dataset))
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    return tf


def test_input_dataset_gives_every_item_of_every_epoch_once(fake_tf, text_files):
    queue = shardq.WorkQueue(text_files(2, 40), num_epochs=2, num_slices=6, name="tf-items")
    ds = shardq.tf.input_dataset(queue)
    assert ds.signature == ((), "string")
    items = collections.Counter(ds)
    assert len(items) == queue.num_items and set(items.values()) == {2}
    assert all(isinstance(i, bytes) for i in items)


def test_pai_style_work_queue_input_dataset_is_a_tf_dataset(fake_tf, text_files):
    files = text_files(3, 5)
    work_queue = shardq.tf.data.WorkQueue(files, 1, False, None, None, None, "tf-pai")
    assert sorted(work_queue.input_dataset()) == sorted(f.encode() for f in files)


def test_dataset_gives_every_record_once_and_refuses_other_readers(fake_tf, text_files):
    files = text_files(2, 30)
    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=5, name="tf-records")
    lines = collections.Counter(shardq.tf.dataset(queue, reader="text"))
    assert len(lines) == 60 and set(lines.values()) == {2}
    with pytest.raises(shardq.InvalidArgumentError, match="'table'"):
        shardq.tf.dataset(queue, reader="table")
