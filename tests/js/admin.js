// kafkajs admin calls for the integration tests: one command, its result as a JSON line.
//   node admin.js --bootstrap H:P delete-records TOPIC PARTITION OFFSET
//     admin.deleteTopicRecords, then prints admin.fetchTopicOffsets(TOPIC)
const { Kafka, logLevel } = require("kafkajs");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

async function main() {
  const rest = process.argv.slice(process.argv.indexOf("--bootstrap") + 2);
  const [command, ...params] = rest;
  const kafka = new Kafka({ clientId: "kafkajs-admin", brokers: [arg("bootstrap")], logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  try {
    if (command === "delete-records") {
      const [topic, partition, offset] = params;
      // kafkajs looks the leaders up in metadata it must have loaded already
      await admin.fetchTopicMetadata({ topics: [topic] });
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: Number(partition), offset }] });
      const offsets = await admin.fetchTopicOffsets(topic);
      process.stdout.write(JSON.stringify({ offsets }) + "\n");
    } else {
      throw new Error(`unknown command ${command}`);
    }
  } finally {
    await admin.disconnect();
  }
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ error: String(err && err.type ? err.type : err), message: String(err) }) + "\n");
  process.exit(1);
});
