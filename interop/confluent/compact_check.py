"""confluent-kafka (librdkafka) against a Kafka-protocol server: a compacted
topic ends with only the latest value per key.

Creates a topic with cleanup.policy=compact and small segments
(segment.ms=1000, min.cleanable.dirty.ratio=0.01, min.compaction.lag.ms=0),
produces 20 values for each of 50 keys and a tombstone for 5 of them, waits
until the segment holding them has rolled (a sentinel record is produced in
a later segment), then reads the topic from the beginning until every key
appears once, with its latest value (deleted keys: only their tombstone, or
nothing once delete.retention.ms has passed), within a deadline. Offsets
never change: each surviving record is read at the offset it was produced at.
Prints one PASS/FAIL line; exits 0 only on PASS.

Usage: python3 compact_check.py BOOTSTRAP [TIMEOUT_S]
"""
import sys
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9092"
deadline_s = float(sys.argv[2]) if len(sys.argv) > 2 else 120
topic = "compact-check-" + uuid.uuid4().hex[:8]
KEYS, ROUNDS, DELETED = 50, 20, 5


def fail(why):
    print(f"confluent compact: FAIL {why}")
    sys.exit(1)


admin = AdminClient({"bootstrap.servers": bootstrap})
configs = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
           "min.compaction.lag.ms": "0", "delete.retention.ms": "600000"}
for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=configs)]).values():
    try:
        f.result(30)
    except Exception as e:  # noqa: BLE001 - the client's error is the message
        fail(f"create topic: {e}")

latest = {}  # key -> (value or None, offset)
acked = []
errors = []


def delivered(err, msg):
    if err is not None:
        errors.append(err)
        return
    acked.append(msg)
    latest[msg.key()] = (msg.value(), msg.offset())


p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
for r in range(ROUNDS):
    for k in range(KEYS):
        p.produce(topic, key=b"k%d" % k, value=b"v%d-%d" % (k, r), on_delivery=delivered)
    p.poll(0)
for k in range(DELETED):
    p.produce(topic, key=b"k%d" % k, value=None, on_delivery=delivered)
p.flush(30)
if errors or len(acked) != KEYS * ROUNDS + DELETED:
    fail(f"produce: {len(acked)} acked, errors {errors[:3]}")
# A record in a later segment: the one holding the others is then closed,
# which is what compaction works on (the head is never compacted).
time.sleep(1.5)
p.produce(topic, key=b"sentinel", value=b"s", on_delivery=delivered)
p.flush(30)
sentinel_off = latest[b"sentinel"][1]


def read_all():
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "compact-check-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    seen = []
    end = time.time() + 30
    while time.time() < end:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            c.close()
            fail(f"consume: {m.error()}")
        seen.append((m.key(), m.value(), m.offset()))
        if m.offset() >= sentinel_off:
            break
    c.close()
    return seen


start = time.time()
while True:
    seen = read_all()
    per_key = {}
    for key, value, off in seen:
        per_key.setdefault(key, []).append((value, off))
    once = all(len(v) == 1 for v in per_key.values())
    if once:
        break
    if time.time() - start > deadline_s:
        dups = sum(len(v) - 1 for v in per_key.values())
        fail(f"after {deadline_s:.0f}s the topic still holds {dups} superseded records ({len(seen)} read)")
    time.sleep(2)

for key, (value, off) in latest.items():
    got = per_key.get(key)
    if value is None:  # deleted: its tombstone, if anything
        if got and (got[0][0] is not None or got[0][1] != off):
            fail(f"deleted key {key!r}: read {got}")
        continue
    if not got or got[0] != (value, off):
        fail(f"key {key!r}: read {got}, want its latest value {value!r} at offset {off}")
print(f"confluent compact: PASS keys={len(per_key)} read={len(seen)} produced={len(acked)} "
      f"compacted_after_s={time.time() - start:.1f}")
