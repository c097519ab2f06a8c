package quire.interop;

import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;

/**
 * Kafka Streams with exactly_once_v2 against a Kafka-protocol server: a word
 * count with a state store (its changelog and repartition topics are
 * Streams' internal topics, the changelog compacted).
 *
 *   WordCount produce BOOTSTRAP RUN LINES   the input: LINES lines, word i%WORDS in line i
 *   WordCount run BOOTSTRAP RUN [N]         the Streams application (until killed), start N
 *   WordCount verify BOOTSTRAP RUN LINES    read the output read_committed: every
 *                                           word's last count is LINES/WORDS, and no
 *                                           count ever exceeds it or goes back
 */
public class WordCount {
    static final int WORDS = 50;

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], run = args[2];
        String in = "wc-in-" + run, out = "wc-out-" + run;
        switch (mode) {
            case "produce" -> produce(bootstrap, in, out, Integer.parseInt(args[3]));
            case "run" -> runStreams(bootstrap, run, in, out, args.length > 3 ? args[3] : "0");
            case "verify" -> System.exit(verify(bootstrap, out, Integer.parseInt(args[3])));
            default -> throw new IllegalArgumentException(mode);
        }
    }

    static void produce(String bootstrap, String in, String out, int lines) throws Exception {
        Properties a = new Properties();
        a.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(in, 4, (short) 1), new NewTopic(out, 4, (short) 1))).all().get();
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < lines; i++) {
                prod.send(new ProducerRecord<>(in, Integer.toString(i), "word" + (i % WORDS)));
            }
        }
        System.out.println("streams: produced " + lines + " lines to " + in);
    }

    static void runStreams(String bootstrap, String run, String in, String out, String instance) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "wc-" + run);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // A fresh state directory per start: the store is rebuilt from its
        // changelog topic, which exactly-once must have kept consistent.
        p.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/quire-streams-" + run + "-" + instance);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // A SIGKILLed instance leaves its group only when its session
        // expires: the shortest session the broker allows (Kafka's
        // group.min.session.timeout.ms, 6 s) instead of Streams' 45 s, so
        // that the next instance gets the partitions within the verify
        // window. (Its open transaction is aborted by the coordinator
        // after Streams' transaction.timeout.ms, 10 s.)
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);
        StreamsBuilder b = new StreamsBuilder();
        b.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
            .groupBy((k, v) -> v, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        System.out.println("streams: running");
        try {
            Thread.sleep(Long.MAX_VALUE); // until killed
        } catch (InterruptedException e) {
            streams.close();
        }
    }

    static int verify(String bootstrap, String out, int lines) {
        long want = lines / WORDS;
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        Map<String, Long> last = new TreeMap<>();
        try (KafkaConsumer<String, Long> cons = new KafkaConsumer<>(c, new StringDeserializer(), new LongDeserializer())) {
            List<TopicPartition> parts = new ArrayList<>();
            for (int i = 0; i < 4; i++) parts.add(new TopicPartition(out, i));
            cons.assign(parts);
            cons.seekToBeginning(parts);
            long deadline = System.currentTimeMillis() + 90_000;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, Long> rs = cons.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, Long> r : rs) {
                    Long prev = last.get(r.key());
                    if (prev != null && r.value() <= prev) {
                        System.out.println("streams: FAIL " + r.key() + " counted " + r.value() + " after " + prev + " (a duplicate or a lost update)");
                        return 1;
                    }
                    if (r.value() > want) {
                        System.out.println("streams: FAIL " + r.key() + " counted " + r.value() + ", more than its " + want + " lines");
                        return 1;
                    }
                    last.put(r.key(), r.value());
                }
                if (last.size() == WORDS && last.values().stream().allMatch(v -> v == want)) {
                    System.out.println("streams: PASS words=" + WORDS + " count=" + want + " (read_committed)");
                    return 0;
                }
            }
        }
        System.out.println("streams: FAIL after 90 s the counts are " + last + ", want " + WORDS + " words at " + want);
        return 1;
    }
}
