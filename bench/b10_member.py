"""The group member B10 kills: ``python -m bench.b10_member WAREHOUSE NAMESPACE TABLE GROUP
SESSION_TIMEOUT`` joins the group, polls, commits the positions of its assignment after every
poll, and prints one JSON line on stdout whenever its state changes: member id, generation,
assignment (``[table, bucket]`` pairs) and whether it has read and committed every record of
its buckets (``caught_up``). It runs until it is killed.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import leasekit as lk

    warehouse, namespace, table, group, session_timeout = argv
    conn = lk.connect(warehouse=warehouse, namespace=namespace)
    consumer = conn.consumer(
        table,
        group_id=group,
        session_timeout=session_timeout,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    last = None
    while True:
        consumer.poll(timeout="0.2s")
        try:
            consumer.commit()  # unchanged positions are not written
        except lk.CommitFailedError:
            continue  # its buckets moved meanwhile: the next poll follows the group
        assignment = sorted(consumer.assignment())
        caught_up = all(
            consumer.highwater(tb) is not None and consumer.position(tb) == consumer.highwater(tb)
            for tb in assignment
        )
        state = {
            "member_id": consumer.member_id,
            "generation": consumer.generation,
            "assignment": [list(tb) for tb in assignment],
            "caught_up": caught_up,
        }
        if state != last:
            print(json.dumps(state), flush=True)
            last = state


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
