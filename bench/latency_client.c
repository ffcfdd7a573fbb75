/* Produce-to-ack and produce-to-consume latency at a fixed rate, measured by a client in C on
 * librdkafka, so that the client's own cost stays out of the figures (bench/broker.py builds it).
 *
 *   latency_client BOOTSTRAP TOPIC RATE SECONDS LINGER_MS ACKS
 *
 * Sends RATE messages a second for SECONDS to partition 0 of TOPIC, each 100 bytes starting with
 * its send time (CLOCK_MONOTONIC, ns; producer and consumer run in this one process). The
 * delivery report gives produce-to-ack; a consumer assigned to the partition's end (on its own
 * thread) gives produce-to-consume. Prints one JSON object with the percentiles of both and the
 * send times of the slowest messages, from the start (CLOCK_MONOTONIC, which the broker's
 * time.monotonic_ns shares on one host), to find what the broker was doing then. */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#define MESSAGE_BYTES 100
#define SLOWEST 10

typedef struct {
    double *ms;
    int64_t *sent_ns;
    long count;
    long capacity;
} samples_t;

static samples_t acked, consumed;
static volatile int stopping;
static long expected;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void add(samples_t *s, int64_t sent_ns) {
    if (s->count < s->capacity) {
        s->sent_ns[s->count] = sent_ns;
        s->ms[s->count++] = (now_ns() - sent_ns) / 1e6;
    }
}

static int64_t sent_of(const void *payload, size_t len) {
    int64_t sent = 0;
    if (len >= sizeof sent) memcpy(&sent, payload, sizeof sent);
    return sent;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) add(&acked, sent_of(m->payload, m->len));
}

static rd_kafka_t *client(rd_kafka_type_t type, const char *bootstrap, const char **settings) {
    char error[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, error, sizeof error) ||
        rd_kafka_conf_set(conf, "log_level", "3", error, sizeof error)) {
        fprintf(stderr, "%s\n", error);
        exit(2);
    }
    for (; settings[0] != NULL; settings += 2) {
        if (rd_kafka_conf_set(conf, settings[0], settings[1], error, sizeof error)) {
            fprintf(stderr, "%s=%s: %s\n", settings[0], settings[1], error);
            exit(2);
        }
    }
    if (type == RD_KAFKA_PRODUCER) rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(type, conf, error, sizeof error);
    if (rk == NULL) {
        fprintf(stderr, "%s\n", error);
        exit(2);
    }
    return rk;
}

typedef struct {
    rd_kafka_t *consumer;
} receiver_t;

/* Delivery reports are served here as soon as they arrive: polled only between sends, an ack
 * would wait for the next message due (20 ms apart at 50 msgs/s) and the figure would be the
 * send interval, not the broker's answer. */
static void *serve_reports(void *arg) {
    rd_kafka_t *producer = arg;
    while (!stopping) rd_kafka_poll(producer, 10);
    return NULL;
}

static void *receive(void *arg) {
    receiver_t *r = arg;
    while (!stopping && consumed.count < expected) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(r->consumer, 100);
        if (m == NULL) continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) add(&consumed, sent_of(m->payload, m->len));
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static int by_ms(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_summary(const char *name, samples_t *s, int64_t start_ns, int last) {
    /* the slowest first: their send times, relative to the start, before the values are sorted */
    long slow[SLOWEST];
    int found = 0;
    for (int k = 0; k < SLOWEST && k < s->count; k++) {
        long best = -1;
        for (long i = 0; i < s->count; i++) {
            int taken = 0;
            for (int j = 0; j < found; j++) taken |= slow[j] == i;
            if (!taken && (best < 0 || s->ms[i] > s->ms[best])) best = i;
        }
        slow[found++] = best;
    }
    printf("  \"%s\": {\"messages\": %ld, \"slowest\": [", name, s->count);
    for (int j = 0; j < found; j++) {
        printf("%s{\"at_ms\": %.3f, \"ms\": %.3f}", j ? ", " : "",
               (s->sent_ns[slow[j]] - start_ns) / 1e6, s->ms[slow[j]]);
    }
    qsort(s->ms, s->count, sizeof(double), by_ms);
    double p50 = -1, p99 = -1, p999 = -1, max = -1, sum = 0;
    if (s->count) {
        p50 = s->ms[(long)(s->count * 0.5)];
        p99 = s->ms[(long)(s->count * 0.99)];
        p999 = s->ms[(long)(s->count * 0.999)];
        max = s->ms[s->count - 1];
        for (long i = 0; i < s->count; i++) sum += s->ms[i];
    }
    printf("], \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, "
           "\"mean_ms\": %.3f}%s\n",
           p50, p99, p999, max, s->count ? sum / s->count : -1.0, last ? "" : ",");
}

static void alloc_samples(samples_t *s, long n) {
    s->ms = calloc(n, sizeof(double));
    s->sent_ns = calloc(n, sizeof(int64_t));
    s->capacity = n;
    if (s->ms == NULL || s->sent_ns == NULL) exit(2);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC RATE SECONDS LINGER_MS ACKS\n", argv[0]);
        return 2;
    }
    const char *bootstrap = argv[1], *topic = argv[2];
    long rate = atol(argv[3]);
    double seconds = atof(argv[4]);
    expected = (long)(rate * seconds);
    alloc_samples(&acked, expected);
    alloc_samples(&consumed, expected);

    const char *producer_settings[] = {"linger.ms", argv[5], "acks", argv[6],
                                       "enable.idempotence", "false", "socket.nagle.disable",
                                       "true", "queue.buffering.max.messages", "1000000", NULL};
    const char *consumer_settings[] = {"group.id", "bench-c-latency", "enable.auto.commit",
                                       "false", "fetch.wait.max.ms", "100", "fetch.min.bytes", "1",
                                       "socket.nagle.disable", "true", NULL};
    rd_kafka_t *producer = client(RD_KAFKA_PRODUCER, bootstrap, producer_settings);
    rd_kafka_t *consumer = client(RD_KAFKA_CONSUMER, bootstrap, consumer_settings);

    char value[MESSAGE_BYTES];
    memset(value, 'x', sizeof value);
    /* warm up: the topic exists and both clients are connected before anything is timed */
    int64_t warm = now_ns();
    memcpy(value, &warm, sizeof warm);
    rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                      RD_KAFKA_V_VALUE(value, sizeof value), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                      RD_KAFKA_V_END);
    rd_kafka_flush(producer, 30000);
    acked.count = 0;
    pthread_t reports;
    pthread_create(&reports, NULL, serve_reports, producer);
    rd_kafka_topic_partition_list_t *assignment = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(assignment, topic, 0)->offset = RD_KAFKA_OFFSET_END;
    rd_kafka_assign(consumer, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
    for (int i = 0; i < 20; i++) { /* let the consumer reach the end before the timed part */
        rd_kafka_message_t *m = rd_kafka_consumer_poll(consumer, 100);
        if (m != NULL) rd_kafka_message_destroy(m);
    }

    receiver_t r = {consumer};
    pthread_t thread;
    pthread_create(&thread, NULL, receive, &r);
    const long per_tick = rate / 1000 > 0 ? rate / 1000 : 1; /* a tick of 1 ms */
    int64_t start = now_ns();
    for (long sent = 0; sent < expected;) {
        int64_t due = start + (int64_t)(sent * 1e9 / rate);
        int64_t wait = due - now_ns();
        if (wait > 0) {
            struct timespec ts = {wait / 1000000000, wait % 1000000000};
            nanosleep(&ts, NULL);
        }
        for (long i = 0; i < per_tick && sent < expected; i++, sent++) {
            int64_t t = now_ns();
            memcpy(value, &t, sizeof t);
            while (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                                     RD_KAFKA_V_VALUE(value, sizeof value),
                                     RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) ==
                   RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
            }
        }
    }
    for (int64_t until = now_ns() + 30 * (int64_t)1000000000;
         rd_kafka_outq_len(producer) > 0 && now_ns() < until;) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    int64_t deadline = now_ns() + 30 * (int64_t)1000000000;
    while (consumed.count < expected && now_ns() < deadline) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    stopping = 1;
    pthread_join(thread, NULL);
    pthread_join(reports, NULL);

    printf("{\n  \"rate_msgs_per_s\": %ld, \"seconds\": %.1f, \"linger_ms\": %s, \"acks\": \"%s\",\n"
           "  \"start_monotonic_ns\": %" PRId64 ",\n",
           rate, seconds, argv[5], argv[6], start);
    print_summary("produce_to_ack", &acked, start, 0);
    print_summary("produce_to_consume", &consumed, start, 1);
    printf("}\n");
    rd_kafka_consumer_close(consumer);
    rd_kafka_destroy(consumer);
    rd_kafka_destroy(producer);
    return 0;
}
