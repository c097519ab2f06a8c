import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * The load of `quire perf bookie`'s bookie phase, against a real BookKeeper: IN_FLIGHT adds of
 * ENTRY random bytes kept outstanding over 4 ledgers of one bookie (ensemble 1, write and ack
 * quorum 1), for WARMUP seconds unmeasured, then for DURATION seconds.
 *
 * <p>Usage: LoadGen ZK_HOSTPORT IN_FLIGHT ENTRY WARMUP DURATION. Last line:
 * {@code bookkeeper entries=N seconds=S mb_s=X p50_ms=A p99_ms=B}.
 */
public class LoadGen {
    public static void main(String[] args) throws Exception {
        String zk = args[0];
        int inFlight = Integer.parseInt(args[1]);
        int entryBytes = Integer.parseInt(args[2]);
        double warmUp = Double.parseDouble(args[3]);
        double duration = Double.parseDouble(args[4]);
        int ledgers = 4;

        ClientConfiguration conf = new ClientConfiguration()
                .setMetadataServiceUri("zk+hierarchical://" + zk + "/ledgers");
        conf.setAddEntryTimeout(60);
        // The default, 5000, is a rate limiter of 5,000 adds/s per ledger handle: it, not the
        // bookie, would be measured.
        conf.setThrottleValue(0);
        BookKeeper bk = new BookKeeper(conf);
        LedgerHandle[] handles = new LedgerHandle[ledgers];
        for (int i = 0; i < ledgers; i++) {
            handles[i] = bk.createLedger(1, 1, 1, BookKeeper.DigestType.CRC32C, new byte[0]);
        }
        byte[] payload = new byte[entryBytes];
        new Random(1).nextBytes(payload);

        run(handles, payload, inFlight, warmUp, false);
        run(handles, payload, inFlight, duration, true);
        for (LedgerHandle h : handles) {
            h.close();
        }
        bk.close();
    }

    static void run(LedgerHandle[] handles, byte[] payload, int inFlight, double seconds, boolean report)
            throws Exception {
        Semaphore slots = new Semaphore(inFlight);
        long[] latencies = new long[1 << 24];
        AtomicInteger done = new AtomicInteger();
        AtomicReference<String> failure = new AtomicReference<>();
        long start = System.nanoTime();
        long deadline = start + (long) (seconds * 1e9);
        for (long i = 0; System.nanoTime() < deadline && failure.get() == null; i++) {
            slots.acquire();
            long sent = System.nanoTime();
            handles[(int) (i % handles.length)].asyncAddEntry(payload, (rc, lh, entryId, ctx) -> {
                if (rc != 0) {
                    failure.compareAndSet(null, "add failed, rc=" + rc);
                }
                int k = done.getAndIncrement();
                if (k < latencies.length) {
                    latencies[k] = System.nanoTime() - sent;
                }
                slots.release();
            }, null);
        }
        slots.acquire(inFlight); // the last adds
        double elapsed = (System.nanoTime() - start) / 1e9;
        if (failure.get() != null) {
            throw new IllegalStateException(failure.get());
        }
        if (!report) {
            return;
        }
        int n = done.get();
        long[] sorted = Arrays.copyOf(latencies, Math.min(n, latencies.length));
        Arrays.sort(sorted);
        System.out.printf("bookkeeper entries=%d seconds=%.2f mb_s=%.1f p50_ms=%.3f p99_ms=%.3f%n",
                n, elapsed, n * (double) payload.length / elapsed / 1e6,
                sorted[sorted.length / 2] / 1e6, sorted[(int) (sorted.length * 0.99)] / 1e6);
    }
}
