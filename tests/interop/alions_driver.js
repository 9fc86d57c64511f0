'use strict';
// Drives npm `ali-ons` (a pure JavaScript RocketMQ 4.x client) for hanet's interop tests.
//
//   node alions_driver.js <produce|consume|bench> --namesrv HOST:PORT --topic T [options]
//
// Every line on stdout is one JSON object with an "event" key; the last one is the summary
// ("summary", or "bench" for bench). The client's own log lines go to stderr. ali-ons is loaded
// from --modules DIR (a node_modules folder; tests/interop_support.py passes its cached install),
// else through node's usual lookup (NODE_PATH). Exit status: 0 done, 1 some sends failed or the client failed, 2 consume timed out
// before --expect bodies, 3 bad arguments.

const USAGE = `usage: node alions_driver.js <produce|consume|bench> --namesrv HOST:PORT --topic T
  [--group G] [--count N] [--in-flight K] [--tag X] [--delay-level L] [--prefix P]
  [--fail-first] [--from-first] [--no-keys] [--seconds S] [--expect N] [--timeout S] [--instance NAME]
  [--poll-ms MS] [--modules NODE_MODULES_DIR] [--access-key AK --secret-key SK] [--verbose]`;

const FLAGS = new Set([ 'fail-first', 'from-first', 'no-keys', 'verbose' ]);
const VALUES = new Set([
  'namesrv', 'topic', 'group', 'count', 'in-flight', 'tag', 'delay-level', 'prefix', 'seconds',
  'expect', 'timeout', 'instance', 'modules', 'poll-ms', 'access-key', 'secret-key',
]);
const INTEGERS = new Set([ 'count', 'in-flight', 'delay-level', 'expect', 'poll-ms' ]);
const NUMBERS = new Set([ 'seconds', 'timeout' ]);

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

function usage(message) {
  process.stderr.write(`alions_driver: ${message}\n${USAGE}\n`);
  process.exit(3);
}

function parseArgs(argv) {
  const mode = argv[0];
  if (![ 'produce', 'consume', 'bench' ].includes(mode)) {
    usage(`unknown mode ${JSON.stringify(mode)}`);
  }
  const opts = {
    mode,
    count: 10,
    'in-flight': 1,
    'delay-level': 0,
    prefix: 'msg',
    seconds: 5,
    expect: 0,
    timeout: 30,
  };
  for (let i = 1; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) usage(`unexpected argument ${JSON.stringify(arg)}`);
    const name = arg.slice(2);
    if (FLAGS.has(name)) {
      opts[name] = true;
    } else if (VALUES.has(name)) {
      if (i + 1 >= argv.length) usage(`--${name} needs a value`);
      let value = argv[++i];
      if (INTEGERS.has(name) || NUMBERS.has(name)) {
        value = Number(value);
        if (!Number.isFinite(value) || value < 0 || (INTEGERS.has(name) && !Number.isInteger(value))) {
          usage(`--${name} needs a non-negative ${INTEGERS.has(name) ? 'integer' : 'number'}`);
        }
      }
      opts[name] = value;
    } else {
      usage(`unknown option ${arg}`);
    }
  }
  if (!opts.namesrv) usage('--namesrv is required');
  if (!opts.topic) usage('--topic is required');
  if (opts['in-flight'] < 1) usage('--in-flight must be at least 1');
  if (!opts.group) opts.group = mode === 'consume' ? 'hanet-interop-consumer' : 'hanet-interop-producer';
  return opts;
}

function loadAliOns(modules) {
  try {
    return require(modules ? require('path').resolve(modules, 'ali-ons') : 'ali-ons');
  } catch (err) {
    process.stderr.write(`alions_driver: cannot load ali-ons (${err.message}); pass --modules or set NODE_PATH\n`);
    emit({ event: 'summary', client: 'alions', ok: false, error: `cannot load ali-ons: ${err.message}` });
    process.exit(1);
  }
}

// ali-ons' default logger is silent for info and console.* for warn/error; this one writes
// everything to stderr (info and debug only with --verbose) so stdout stays JSON lines.
function makeLogger(verbose) {
  const util = require('util');
  const write = level => (...args) => process.stderr.write(`[ali-ons ${level}] ${util.format(...args)}\n`);
  const quiet = () => {};
  return {
    debug: verbose ? write('debug') : quiet,
    info: verbose ? write('info') : quiet,
    warn: write('warn'),
    error: write('error'),
  };
}

function errorText(err) {
  if (!err) return 'unknown error';
  return `${err.name || 'Error'}: ${err.message || String(err)}`;
}

function clientOptions(opts) {
  const options = {
    nameSrv: opts.namesrv,
    httpclient: {}, // required by ali-ons' constructor, unused once nameSrv is given
    logger: makeLogger(opts.verbose),
  };
  if (opts.instance) options.instanceName = opts.instance;
  // RocketMQ's ACL: ali-ons signs every request (brokers and name servers) with these
  if (opts['access-key']) {
    options.accessKey = opts['access-key'];
    options.secretKey = opts['secret-key'];
  }
  // how often routes are read from the name server (ali-ons' option name, misspelt; 30 s)
  if (opts['poll-ms']) options.pollNameServerInteval = opts['poll-ms'];
  return options;
}

// Runs `fn` once, then exits: the inner producer ali-ons keeps for a consumer holds timers
// that would keep node alive after close().
let exiting = false;
async function finish(code, closeFn, summary) {
  if (exiting) return;
  exiting = true;
  const hardStop = setTimeout(() => {
    process.stderr.write('alions_driver: client close took over 10 s, exiting anyway\n');
    if (summary) emit(Object.assign(summary, { closed: false }));
    process.exit(code);
  }, 10000);
  let closed = true;
  try {
    if (closeFn) await closeFn();
  } catch (err) {
    closed = false;
    process.stderr.write(`alions_driver: close failed: ${errorText(err)}\n`);
  }
  clearTimeout(hardStop);
  if (summary) emit(Object.assign(summary, { closed }));
  process.exit(code);
}

function percentile(sorted, p) {
  if (!sorted.length) return null;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p / 100 * sorted.length) - 1));
  return Math.round(sorted[index] * 1000) / 1000;
}

async function produce(opts, bench) {
  const { Producer, Message } = loadAliOns(opts.modules);
  const producer = new Producer(Object.assign(clientOptions(opts), { producerGroup: opts.group }));
  const errors = [];
  producer.on('error', err => {
    errors.push(errorText(err));
    if (!bench) emit({ event: 'error', error: errorText(err) });
  });
  const started = process.hrtime.bigint();
  const elapsed = () => Number(process.hrtime.bigint() - started) / 1e9;
  const deadline = bench ? opts.seconds : opts.timeout;
  const latencies = [];
  let next = 0;
  let sent = 0;
  let failed = 0;
  let timedOut = false;
  let stopped = null;

  const summary = () => ({
    event: bench ? 'bench' : 'summary',
    client: 'alions',
    mode: opts.mode,
    topic: opts.topic,
    group: opts.group,
    clientId: producer.clientId,
    sent,
    failed,
    timedOut,
    stoppedBy: stopped,
    elapsedS: Math.round(elapsed() * 1000) / 1000,
  });
  process.on('SIGTERM', () => {
    stopped = 'SIGTERM';
    finish(0, () => producer.close(), summary());
  });

  async function worker() {
    for (;;) {
      if (stopped) return;
      if (elapsed() >= deadline) {
        if (!bench) timedOut = true;
        return;
      }
      if (!bench && next >= opts.count) return;
      const i = next++;
      const body = `${opts.prefix}-${i}`;
      const msg = new Message(opts.topic, opts.tag || '', body);
      // each message's KEYS is its body (so a test can look it up) unless --no-keys
      if (!opts['no-keys']) msg.keys = [ body ];
      if (opts['delay-level']) msg.delayTimeLevel = opts['delay-level'];
      const t0 = process.hrtime.bigint();
      try {
        const result = await producer.send(msg);
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        sent++;
        latencies.push(ms);
        if (!bench) {
          const mq = result.messageQueue || {};
          emit({
            event: 'sent',
            i,
            body,
            status: result.sendStatus,
            msgId: result.msgId,
            brokerName: mq.brokerName === undefined ? null : mq.brokerName,
            queueId: mq.queueId === undefined ? null : Number(mq.queueId),
            queueOffset: result.queueOffset === undefined ? null : result.queueOffset,
            latencyMs: Math.round(ms * 1000) / 1000,
          });
        }
      } catch (err) {
        failed++;
        if (!bench || failed <= 10) emit({ event: 'send_error', i, body, error: errorText(err) });
        if (bench) await new Promise(resolve => setTimeout(resolve, 10));
      }
    }
  }

  const workers = [];
  for (let k = 0; k < opts['in-flight']; k++) workers.push(worker());
  await Promise.all(workers);
  if (stopped) return;
  const result = summary();
  if (bench) {
    const sorted = latencies.slice().sort((a, b) => a - b);
    const seconds = elapsed();
    Object.assign(result, {
      inFlight: opts['in-flight'],
      msgsPerSec: seconds > 0 ? Math.round(sent / seconds * 10) / 10 : null,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
    });
  } else {
    result.errors = errors.slice(0, 10);
  }
  await finish(failed || (!bench && sent < opts.count) ? 1 : 0, () => producer.close(), result);
}

async function consume(opts) {
  const { Consumer } = loadAliOns(opts.modules);
  const options = Object.assign(clientOptions(opts), { consumerGroup: opts.group });
  if (opts['from-first']) options.consumeFromWhere = 'CONSUME_FROM_FIRST_OFFSET';
  const consumer = new Consumer(options);
  const clientId = consumer.clientId;
  const failedOnce = new Set(); // bodies whose first delivery was refused (--fail-first)
  const done = new Set(); // bodies consumed successfully
  let deliveries = 0;
  let stopped = null;
  const started = Date.now();

  const summary = timedOut => ({
    event: 'summary',
    client: 'alions',
    mode: 'consume',
    topic: opts.topic,
    group: opts.group,
    clientId,
    deliveries,
    distinct: done.size,
    expected: opts.expect,
    timedOut,
    stoppedBy: stopped,
    elapsedS: (Date.now() - started) / 1000,
  });
  const stop = (code, timedOut) => finish(code, () => consumer.close(), summary(timedOut));

  consumer.on('error', err => emit({ event: 'error', error: errorText(err) }));
  process.on('SIGTERM', () => {
    stopped = 'SIGTERM';
    stop(0, false);
  });
  const timer = setTimeout(() => stop(opts.expect ? 2 : 0, true), opts.timeout * 1000);

  consumer.subscribe(opts.topic, opts.tag || '*', async (msg, mq) => {
    const body = msg.body ? msg.body.toString() : '';
    const refuse = Boolean(opts['fail-first']) && !failedOnce.has(body) && !done.has(body);
    deliveries++;
    emit({
      event: 'received',
      body,
      msgId: msg.msgId,
      originMsgId: msg.originMessageId || null,
      topic: msg.topic,
      tags: msg.tags || null,
      brokerName: mq && mq.brokerName !== undefined ? mq.brokerName : null,
      queueId: Number(msg.queueId),
      queueOffset: Number(msg.queueOffset),
      reconsumeTimes: msg.reconsumeTimes,
      clientId,
      action: refuse ? 'retry' : 'ok',
    });
    if (refuse) {
      failedOnce.add(body);
      return Consumer.ACTION_RETRY; // the client sends it back (CONSUMER_SEND_MSG_BACK)
    }
    done.add(body);
    if (opts.expect && done.size >= opts.expect) {
      clearTimeout(timer);
      setImmediate(() => stop(0, false));
    }
  });
  try {
    await consumer.ready();
    emit({ event: 'started', client: 'alions', clientId, group: opts.group, topic: opts.topic });
  } catch (err) {
    emit({ event: 'error', error: errorText(err) });
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.mode === 'consume') {
    await consume(opts);
  } else {
    await produce(opts, opts.mode === 'bench');
  }
}

main().catch(err => {
  process.stderr.write(`alions_driver: ${err && err.stack ? err.stack : err}\n`);
  emit({ event: 'summary', client: 'alions', ok: false, error: errorText(err) });
  process.exit(1);
});
