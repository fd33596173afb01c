const { Kafka, logLevel } = require('kafkajs')
const [port, mechanism, password] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'probe', brokers: [`127.0.0.1:${port}`], logLevel: logLevel.NOTHING,
  sasl: { mechanism, username: 'alice', password }, retry: { retries: 0 } })
;(async () => {
  const producer = kafka.producer(); await producer.connect()
  await producer.send({ topic: 'kj', messages: [{ value: 'x' }] }); await producer.disconnect()
  const consumer = kafka.consumer({ groupId: 'kjg-' + mechanism }); await consumer.connect()
  await consumer.subscribe({ topic: 'kj', fromBeginning: true })
  let got = 0
  await new Promise((resolve) => { consumer.run({ eachMessage: async () => { got++; resolve() } }) })
  await consumer.disconnect()
  console.log(JSON.stringify({ ok: true, got }))
})().catch((e) => { console.log(JSON.stringify({ ok: false, error: e.name, message: e.message })); process.exit(1) })
