// One kafkajs consumer-group member for the client matrix (same protocol as
// tests/integration/scripts/matrix_consumer.py): JSON lines on stdout ("started",
// "assigned"), "partition offset" lines appended to --out, commit after every message,
// SIGTERM disconnects cleanly (LeaveGroup), SIGKILL is a crash.
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const bootstrap = arg("bootstrap");
const group = arg("group");
const topic = arg("topic");
const out = fs.openSync(arg("out"), "a");
const sessionTimeout = Number(arg("session-ms", "6000"));

const say = (event, fields = {}) => process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");

async function main() {
  const kafka = new Kafka({ clientId: "kafkajs-matrix", brokers: [bootstrap], logLevel: logLevel.NOTHING,
    retry: { retries: 50, initialRetryTime: 100, maxRetryTime: 1000 } });
  // kafkajs heartbeats between fetches: keep the long poll shorter than the session timeout.
  const consumer = kafka.consumer({ groupId: group, sessionTimeout, heartbeatInterval: 300, maxWaitTimeInMs: 250,
    rebalanceTimeout: 10000 });
  let assignment = null;
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    const parts = (e.payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b);
    const text = JSON.stringify(parts);
    if (text !== assignment) {
      assignment = text;
      say("assigned", { partitions: parts });
    }
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let stopping = false;
  process.on("SIGTERM", async () => {
    if (stopping) return;
    stopping = true;
    await consumer.disconnect();
    fs.closeSync(out);
    process.exit(0);
  });
  await consumer.run({
    autoCommit: true,
    autoCommitThreshold: 1,
    eachMessage: async ({ partition, message }) => {
      fs.writeSync(out, `${partition} ${message.offset}\n`);
    },
  });
  say("started");
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
