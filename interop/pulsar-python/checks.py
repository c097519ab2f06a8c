"""Pulsar's Python client (pulsar-client from PyPI) against a Pulsar-protocol
server: each check prints "ok NAME" or "FAIL NAME: why"; the last line is
"pulsar-python passed=P failed=F". Run by interop/pulsar-python.sh, against
Quire and against Apache Pulsar alike (a check the real broker fails is a
wrong check).

    python3 checks.py pulsar://127.0.0.1:6650
"""
import sys
import time
import uuid

import pulsar

URL = sys.argv[1] if len(sys.argv) > 1 else "pulsar://127.0.0.1:6650"
TIMEOUT_MS = 10_000
results = []


def check(fn):
    try:
        fn()
        results.append((fn.__name__, None))
        print("ok", fn.__name__, flush=True)
    except Exception as e:  # a failed check, reported, never a crash
        results.append((fn.__name__, e))
        print("FAIL", fn.__name__ + ":", repr(e), flush=True)
    return fn


def topic(name):
    return "persistent://public/default/pyck-%s-%s" % (name, uuid.uuid4().hex[:8])


def produce(client, t, n, key=None):
    p = client.create_producer(t, batching_enabled=False)
    for i in range(n):
        if key is None:
            p.send(b"m%d" % i)
        else:
            p.send(b"m%d" % i, partition_key=key(i))
    p.close()


def receive_all(consumer, n, ack=True):
    got = []
    for _ in range(n):
        m = consumer.receive(timeout_millis=TIMEOUT_MS)
        got.append(m)
        if ack:
            consumer.acknowledge(m)
    return got


client = pulsar.Client(URL, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


@check
def exclusive_in_order():
    t = topic("excl")
    c = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, t, 20)
    got = [m.data() for m in receive_all(c, 20)]
    assert got == [b"m%d" % i for i in range(20)], got
    try:
        client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Exclusive)
        raise AssertionError("a second Exclusive consumer was admitted")
    except pulsar.ConsumerBusy:
        pass
    c.close()


@check
def shared_each_once():
    t = topic("shared")
    a = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
    b = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
    produce(client, t, 40)
    seen = []
    deadline = time.time() + 20
    while len(seen) < 40 and time.time() < deadline:
        for c in (a, b):
            try:
                m = c.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            seen.append(m.data())
            c.acknowledge(m)
    assert sorted(seen) == sorted(b"m%d" % i for i in range(40)), (len(seen), len(set(seen)))
    a.close()
    b.close()


@check
def failover_one_active():
    t = topic("failover")
    a = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    produce(client, t, 10)
    got = {}
    for name, c in (("a", a), ("b", b)):
        n = 0
        while True:
            try:
                m = c.receive(timeout_millis=1500)
            except pulsar.Timeout:
                break
            c.acknowledge(m)
            n += 1
        got[name] = n
    assert sorted(got.values()) == [0, 10], got
    a.close()
    b.close()


@check
def key_shared_keys_stay_together():
    t = topic("keyshared")
    a = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.KeyShared)
    b = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.KeyShared)
    produce(client, t, 60, key=lambda i: "k%d" % (i % 6))
    owner = {}
    order = {}
    n = 0
    deadline = time.time() + 20
    while n < 60 and time.time() < deadline:
        for name, c in (("a", a), ("b", b)):
            try:
                m = c.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            k = m.partition_key()
            assert owner.setdefault(k, name) == name, "key %s went to both consumers" % k
            order.setdefault(k, []).append(int(m.data()[1:]))
            c.acknowledge(m)
            n += 1
    assert n == 60, n
    for k, seq in order.items():
        assert seq == sorted(seq), (k, seq)
    a.close()
    b.close()


@check
def nack_redelivery_count():
    t = topic("nack")
    c = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=200)
    produce(client, t, 1)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.redelivery_count() == 0, m.redelivery_count()
    c.negative_acknowledge(m)
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == b"m0" and m.redelivery_count() == 1, (m.data(), m.redelivery_count())
    c.acknowledge(m)
    c.close()


@check
def dead_letter_after_max_redeliveries():
    t = topic("dlq")
    dlq = t + "-s-DLQ"
    d = client.subscribe(dlq, "check", consumer_type=pulsar.ConsumerType.Shared)
    c = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100,
                         dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq))
    produce(client, t, 1)
    for _ in range(3):
        m = c.receive(timeout_millis=TIMEOUT_MS)
        c.negative_acknowledge(m)
    dead = d.receive(timeout_millis=TIMEOUT_MS)
    assert dead.data() == b"m0", dead.data()
    d.acknowledge(dead)
    try:
        m = c.receive(timeout_millis=1500)
        raise AssertionError("delivered again after it went to the DLQ: %r" % m.data())
    except pulsar.Timeout:
        pass
    c.close()
    d.close()


@check
def reader_from_earliest():
    t = topic("reader")
    produce(client, t, 15)
    r = client.create_reader(t, pulsar.MessageId.earliest)
    got = [r.read_next(timeout_millis=TIMEOUT_MS).data() for _ in range(15)]
    assert got == [b"m%d" % i for i in range(15)], got
    assert not r.has_message_available()
    r.close()


@check
def seek_by_id():
    t = topic("seekid")
    p = client.create_producer(t, batching_enabled=False)
    ids = [p.send(b"m%d" % i) for i in range(10)]
    p.close()
    c = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Exclusive, initial_position=pulsar.InitialPosition.Earliest)
    receive_all(c, 10, ack=False)
    c.seek(ids[4])
    m = c.receive(timeout_millis=TIMEOUT_MS)
    # Apache Pulsar 4.0.7 answers m5 here (the cursor is reset to the id, and
    # delivery resumes after it); starting at m4 would be defensible too.
    assert m.data() in (b"m4", b"m5"), m.data()
    c.close()


@check
def seek_by_time():
    t = topic("seektime")
    produce(client, t, 10)
    c = client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Exclusive, initial_position=pulsar.InitialPosition.Earliest)
    first = receive_all(c, 10, ack=False)[0]
    c.seek(first.publish_timestamp())  # the first message's publish time: from the start
    m = c.receive(timeout_millis=TIMEOUT_MS)
    assert m.data() == b"m0", m.data()
    c.close()


client.close()
failed = sum(1 for _, e in results if e is not None)
print("pulsar-python passed=%d failed=%d" % (len(results) - failed, failed))
sys.exit(1 if failed else 0)
