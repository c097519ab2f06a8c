package quire.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java Kafka client against a Kafka-protocol server, end to end:
 *
 * <ol>
 *   <li>create a fresh topic with the AdminClient (partitions, RF configurable);
 *   <li>produce {@code records} keyed records with acks=all and idempotence, and
 *       check every one is acked, at contiguous offsets from 0 in each partition,
 *       in the order sent;
 *   <li>consume with a classic group, commit (commitSync) the exact positions
 *       after {@code commitAfter} records, and close (a clean restart);
 *   <li>check the AdminClient sees those committed offsets;
 *   <li>consume again in the same group, check every partition resumes exactly
 *       at its committed offset, and that both runs together saw every record
 *       once, with the key, value, partition and offset it was produced with.
 * </ol>
 *
 * <p>Arguments are {@code key=value}: bootstrap, records, partitions, rf,
 * commitAfter, topic, group, phaseTimeoutSec, allowDuplicates, deleteTopic.
 * Prints one PASS/FAIL line per check; exits 0 only if all pass.
 */
public final class ClientCheck {
    private final String bootstrap;
    private final int records;
    private final int partitions;
    private final short replicationFactor;
    private final int commitAfter;
    private final String topic;
    private final String group;
    private final Duration phaseTimeout;
    private final boolean allowDuplicates;
    private final boolean deleteTopic;

    // What the producer was told: the partition and offset of record i.
    private final int[] producedPartition;
    private final long[] producedOffset;
    // How many times each record was consumed, over both consumers.
    private final int[] seen;

    private int failures;

    private ClientCheck(Map<String, String> args) {
        long now = System.currentTimeMillis();
        bootstrap = args.getOrDefault("bootstrap", "127.0.0.1:9092");
        records = Integer.parseInt(args.getOrDefault("records", "100000"));
        partitions = Integer.parseInt(args.getOrDefault("partitions", "4"));
        replicationFactor = Short.parseShort(args.getOrDefault("rf", "1"));
        commitAfter = Integer.parseInt(args.getOrDefault("commitAfter", String.valueOf(records * 3 / 5)));
        topic = args.getOrDefault("topic", "interop-java-" + now);
        group = args.getOrDefault("group", "interop-java-group-" + now);
        phaseTimeout = Duration.ofSeconds(Long.parseLong(args.getOrDefault("phaseTimeoutSec", "120")));
        allowDuplicates = Boolean.parseBoolean(args.getOrDefault("allowDuplicates", "false"));
        deleteTopic = Boolean.parseBoolean(args.getOrDefault("deleteTopic", "true"));
        if (records <= 0 || commitAfter <= 0 || commitAfter >= records) {
            throw new IllegalArgumentException("need 0 < commitAfter < records, got " + commitAfter + ", " + records);
        }
        producedPartition = new int[records];
        producedOffset = new long[records];
        seen = new int[records];
        Arrays.fill(producedPartition, -1);
    }

    public static void main(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (String a : argv) {
            int eq = a.indexOf('=');
            if (eq <= 0) {
                System.err.println("usage: ClientCheck [key=value ...] (bootstrap, records, partitions, rf, "
                        + "commitAfter, topic, group, phaseTimeoutSec, allowDuplicates, deleteTopic)");
                System.exit(2);
            }
            args.put(a.substring(0, eq), a.substring(eq + 1));
        }
        ClientCheck check = new ClientCheck(args);
        int code;
        try {
            code = check.run();
        } catch (Exception e) {
            System.out.println("FAIL unexpected: " + e);
            e.printStackTrace(System.out);
            code = 1;
        }
        System.out.flush();
        // Exit explicitly: a client thread left behind by a failed check must
        // not keep the JVM (and the harness's time bound) waiting.
        System.exit(code);
    }

    static String key(int i) {
        return String.format("key-%07d", i);
    }

    // A value the consumer can check against the key, padded to ~100 bytes.
    static String value(int i) {
        return "value-" + i + "-" + "x".repeat(80);
    }

    private void pass(String name, String detail) {
        System.out.printf("PASS %-16s %s%n", name, detail);
    }

    private void fail(String name, String detail) {
        System.out.printf("FAIL %-16s %s%n", name, detail);
        failures++;
    }

    private int run() throws Exception {
        System.out.printf("java client check: bootstrap=%s topic=%s group=%s records=%d partitions=%d rf=%d commitAfter=%d%n",
                bootstrap, topic, group, records, partitions, replicationFactor, commitAfter);
        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        adminProps.put(AdminClientConfig.CLIENT_ID_CONFIG, "interop-java-admin");
        try (Admin admin = Admin.create(adminProps)) {
            if (!createTopic(admin)) {
                return 1;
            }
            if (!produce()) {
                return 1;
            }
            Map<TopicPartition, Long> committed = consumeAndCommit();
            if (committed == null) {
                return 1;
            }
            checkAdminOffsets(admin, committed);
            resume(committed);
            checkCoverage();
            if (deleteTopic && failures == 0) {
                // Tidy, not a check: a failed run keeps its topic to look at.
                try {
                    admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
                    System.out.println("INFO deleted topic " + topic);
                } catch (Exception e) {
                    System.out.println("INFO could not delete topic " + topic + ": " + e);
                }
            }
        }
        System.out.println(failures == 0 ? "java client check: PASS" : "java client check: FAIL (" + failures + " checks failed)");
        return failures == 0 ? 0 : 1;
    }

    private boolean createTopic(Admin admin) throws Exception {
        long start = System.nanoTime();
        try {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replicationFactor)))
                    .all().get(phaseTimeout.toSeconds(), TimeUnit.SECONDS);
        } catch (Exception e) {
            fail("create-topic", "CreateTopics: " + e);
            return false;
        }
        // CreateTopics returning means the controller accepted the topic;
        // wait until metadata shows every partition with a leader.
        long deadline = System.nanoTime() + phaseTimeout.toNanos();
        String last = "";
        while (System.nanoTime() < deadline) {
            try {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                        .get(10, TimeUnit.SECONDS).get(topic);
                long withLeader = d.partitions().stream().filter(p -> p.leader() != null && p.leader().id() >= 0).count();
                if (d.partitions().size() == partitions && withLeader == partitions) {
                    pass("create-topic", partitions + " partitions, RF " + replicationFactor + ", leaders after "
                            + ms(start) + " ms");
                    return true;
                }
                last = d.partitions().size() + " partitions, " + withLeader + " with a leader";
            } catch (Exception e) {
                last = e.toString();
            }
            Thread.sleep(100);
        }
        fail("create-topic", "topic not ready in " + phaseTimeout + ": " + last);
        return false;
    }

    private boolean produce() throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "interop-java-producer");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(phaseTimeout.toMillis()));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());

        AtomicInteger acked = new AtomicInteger();
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        long start = System.nanoTime();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) {
                final int index = i;
                producer.send(new ProducerRecord<>(topic, key(i), value(i)), (md, e) -> {
                    if (e != null) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, e);
                        return;
                    }
                    producedPartition[index] = md.partition();
                    producedOffset[index] = md.offset();
                    acked.incrementAndGet();
                });
            }
            producer.flush();
        }
        long elapsedMs = ms(start);
        if (errors.get() > 0 || acked.get() != records) {
            fail("produce", acked.get() + "/" + records + " acked, " + errors.get() + " errors, first: " + firstError.get());
            return false;
        }
        pass("produce", records + " records acked (acks=all, idempotent) in " + elapsedMs + " ms ("
                + (records * 1000L / Math.max(1, elapsedMs)) + " rec/s)");

        // Idempotent produce to a fresh topic: each partition's offsets are
        // 0..n-1 with no gap or duplicate, in the order the records were sent.
        Map<Integer, Long> nextOffset = new TreeMap<>();
        int bad = 0;
        String firstBad = null;
        for (int i = 0; i < records; i++) {
            long want = nextOffset.getOrDefault(producedPartition[i], 0L);
            if (producedOffset[i] != want) {
                bad++;
                if (firstBad == null) {
                    firstBad = "record " + i + " at partition " + producedPartition[i] + " offset " + producedOffset[i]
                            + ", want offset " + want;
                }
            }
            nextOffset.put(producedPartition[i], producedOffset[i] + 1);
        }
        if (bad > 0) {
            fail("produce-offsets", bad + " records not at the next offset of their partition; first: " + firstBad);
        } else {
            pass("produce-offsets", "contiguous and in send order; per partition: " + nextOffset);
        }
        return true;
    }

    private Properties consumerProps(String clientId) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return c;
    }

    // Checks one consumed record against what was produced; returns its index
    // or -1 (and counts a failure) if it is not a record we produced there.
    private int verify(ConsumerRecord<String, String> r, List<String> problems) {
        int index;
        try {
            index = Integer.parseInt(r.key().substring("key-".length()));
        } catch (RuntimeException e) {
            problems.add("unparsable key " + r.key() + " at " + r.partition() + "@" + r.offset());
            return -1;
        }
        if (index < 0 || index >= records) {
            problems.add("key out of range " + r.key());
            return -1;
        }
        if (!value(index).equals(r.value())) {
            problems.add("record " + index + ": wrong value " + r.value());
        }
        if (producedPartition[index] != r.partition() || producedOffset[index] != r.offset()) {
            problems.add("record " + index + " read at " + r.partition() + "@" + r.offset() + ", produced at "
                    + producedPartition[index] + "@" + producedOffset[index]);
        }
        return index;
    }

    private Map<TopicPartition, Long> consumeAndCommit() {
        long start = System.nanoTime();
        long deadline = start + phaseTimeout.toNanos();
        Map<TopicPartition, Long> next = new HashMap<>();
        List<String> problems = new ArrayList<>();
        int consumed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps("interop-java-consumer-1"))) {
            consumer.subscribe(List.of(topic));
            while (consumed < commitAfter && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> polled = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> r : polled) {
                    int index = verify(r, problems);
                    if (index >= 0) {
                        seen[index]++;
                    }
                    next.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                    consumed++;
                }
            }
            if (consumed < commitAfter) {
                fail("consume-1", "only " + consumed + "/" + commitAfter + " records in " + phaseTimeout);
                return null;
            }
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            next.forEach((tp, off) -> commit.put(tp, new OffsetAndMetadata(off)));
            try {
                consumer.commitSync(commit, Duration.ofSeconds(30));
            } catch (Exception e) {
                fail("commit", "commitSync: " + e);
                return null;
            }
            // The consumer's own view of the commit (OffsetFetch).
            Map<TopicPartition, OffsetAndMetadata> fetched = consumer.committed(commit.keySet(), Duration.ofSeconds(30));
            Map<TopicPartition, Long> fetchedOffsets = new HashMap<>();
            fetched.forEach((tp, om) -> fetchedOffsets.put(tp, om == null ? null : om.offset()));
            if (!fetchedOffsets.equals(next)) {
                fail("commit", "committed() = " + fetchedOffsets + ", committed " + next);
            } else {
                pass("commit", "commitSync of " + consumed + " records: " + new TreeMap<>(asStrings(next)));
            }
        } // close(): leaves the group, as a clean shutdown does.
        if (!problems.isEmpty()) {
            fail("consume-1", problems.size() + " bad records; first: " + problems.get(0));
        } else {
            pass("consume-1", consumed + " records, content checked, in " + ms(start) + " ms; consumer closed");
        }
        return next;
    }

    private void checkAdminOffsets(Admin admin, Map<TopicPartition, Long> committed) {
        try {
            Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, Long> offsets = new HashMap<>();
            got.forEach((tp, om) -> offsets.put(tp, om.offset()));
            if (offsets.equals(committed)) {
                pass("admin-offsets", "AdminClient sees the committed offsets");
            } else {
                fail("admin-offsets", "AdminClient sees " + offsets + ", committed " + committed);
            }
        } catch (Exception e) {
            fail("admin-offsets", "listConsumerGroupOffsets: " + e);
        }
    }

    private void resume(Map<TopicPartition, Long> committed) {
        long start = System.nanoTime();
        long deadline = start + phaseTimeout.toNanos();
        int remaining = 0;
        for (int s : seen) {
            if (s == 0) {
                remaining++;
            }
        }
        List<String> problems = new ArrayList<>();
        Map<TopicPartition, Long> firstOffset = new HashMap<>();
        int consumed = 0;
        int duplicates = 0;
        int belowCommit = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps("interop-java-consumer-2"))) {
            consumer.subscribe(List.of(topic));
            while (remaining > 0 && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    firstOffset.putIfAbsent(tp, r.offset());
                    if (r.offset() < committed.getOrDefault(tp, 0L)) {
                        belowCommit++;
                    }
                    consumed++;
                    int index = verify(r, problems);
                    if (index < 0) {
                        continue;
                    }
                    if (seen[index]++ == 0) {
                        remaining--;
                    } else {
                        duplicates++;
                    }
                }
            }
            // Commit the end too, so a rerun of the group would read nothing.
            consumer.commitSync(Duration.ofSeconds(30));
        } catch (Exception e) {
            fail("resume", "second consumer: " + e);
            return;
        }
        // Every partition with records past its commit must start exactly there.
        int badStarts = 0;
        StringBuilder starts = new StringBuilder();
        List<Map.Entry<TopicPartition, Long>> byPartition = new ArrayList<>(firstOffset.entrySet());
        byPartition.sort(Map.Entry.comparingByKey(Comparator.comparingInt(TopicPartition::partition)));
        for (Map.Entry<TopicPartition, Long> e : byPartition) {
            long want = committed.getOrDefault(e.getKey(), 0L);
            starts.append(' ').append(e.getKey().partition()).append('@').append(e.getValue());
            if (e.getValue() != want) {
                badStarts++;
                problems.add("partition " + e.getKey().partition() + " resumed at " + e.getValue() + ", committed " + want);
            }
        }
        if (badStarts == 0 && belowCommit == 0) {
            pass("resume", "every partition resumed at its committed offset:" + starts);
        } else {
            fail("resume", badStarts + " partitions resumed elsewhere, " + belowCommit + " records below the commit; "
                    + problems);
        }
        if (!problems.isEmpty() && badStarts == 0) {
            fail("consume-2", problems.size() + " bad records; first: " + problems.get(0));
        } else if (remaining > 0) {
            fail("consume-2", remaining + " records never consumed after " + phaseTimeout);
        } else {
            pass("consume-2", consumed + " records, content checked, in " + ms(start) + " ms");
        }
        if (duplicates > 0 && !allowDuplicates) {
            fail("no-duplicates", duplicates + " records consumed twice (allowDuplicates=true accepts them)");
        } else {
            pass("no-duplicates", duplicates + " records consumed twice");
        }
    }

    private void checkCoverage() {
        int missing = 0;
        int firstMissing = -1;
        for (int i = 0; i < records; i++) {
            if (seen[i] == 0) {
                missing++;
                if (firstMissing < 0) {
                    firstMissing = i;
                }
            }
        }
        if (missing == 0) {
            pass("coverage", "all " + records + " records consumed across the restart, no gaps");
        } else {
            fail("coverage", missing + " records never consumed; first: " + key(firstMissing));
        }
    }

    private static Map<String, Long> asStrings(Map<TopicPartition, Long> m) {
        Map<String, Long> out = new HashMap<>();
        m.forEach((tp, v) -> out.put(String.format("%s-%04d", tp.topic(), tp.partition()), v));
        return out;
    }

    private static long ms(long startNanos) {
        return (System.nanoTime() - startNanos) / 1_000_000;
    }
}
