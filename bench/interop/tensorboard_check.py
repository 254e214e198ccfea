"""Checks that the real `tensorboard` package reads shardq's event files.

Run by bench/interop/run (which makes the venv); reads every
events.out.tfevents.* file under LOGDIR and compares the scalars TensorBoard
sees with the expected values passed as TAG=VALUE arguments.
"""
import sys

from tensorboard.backend.event_processing import event_accumulator


def main():
    logdir, expected = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    failures = 0
    for tag, value in expected.items():
        if tag not in tags:
            print(f"MISSING {tag} (tensorboard sees {len(tags)} tags)")
            failures += 1
            continue
        last = acc.Scalars(tag)[-1].value
        ok = abs(last - float(value)) < 1e-6
        print(f"{'ok' if ok else 'MISMATCH'} {tag} = {last} (expected {value})")
        failures += 0 if ok else 1
    print(f"tensorboard read {len(tags)} scalar tags; {failures} problem(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
