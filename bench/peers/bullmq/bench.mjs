// The dispatch benchmark's no-work load through BullMQ: the same number of
// tasks, submitted the same way (batches of 500 by four concurrent
// clients, `addBulk`), run by one worker process with as many concurrent
// jobs as trainyard's benchmark fleet has slots, each job doing nothing.
// Throughput is jobs over the time from the first submission to the last
// completion, after a warm-up batch, as in trainyard-bench's saturation
// phase. Prints one JSON object.
//
//   node bench.mjs --port 6379 --jobs 10000 --concurrency 512
//
// BullMQ keeps its jobs in Redis only (the server here runs without
// persistence, as the benchmark's Redis does for trainyard).

import { Queue, Worker } from 'bullmq';
import { fork } from 'node:child_process';

const BATCH = 500;
const CLIENTS = 4;
const QUEUE = 'nowork';

function options(argv) {
  const opts = { port: 6379, jobs: 10000, concurrency: 512, warmup: 500, role: 'main' };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in opts)) throw new Error(`unknown option --${key}`);
    opts[key] = key === 'role' ? argv[i + 1] : Number(argv[i + 1]);
  }
  return opts;
}

// The worker process: completes jobs and tells the parent when each round
// of `expected` jobs is done, with the time of the last completion.
async function work(opts) {
  const connection = { host: '127.0.0.1', port: opts.port };
  let expected = Infinity;
  let done = 0;
  const worker = new Worker(QUEUE, async () => {}, { connection, concurrency: opts.concurrency });
  worker.on('completed', () => {
    done += 1;
    if (done === expected) process.send({ finished: Date.now() });
  });
  process.on('message', (m) => {
    if (m.expect !== undefined) {
      done = 0;
      expected = m.expect;
    } else if (m.stop) {
      worker.close().then(() => process.exit(0));
    }
  });
  await worker.waitUntilReady();
  process.send({ ready: true });
}

function next(child, key) {
  return new Promise((resolve) => {
    const on = (m) => {
      if (m[key] !== undefined) {
        child.off('message', on);
        resolve(m[key]);
      }
    };
    child.on('message', on);
  });
}

// Submits `n` jobs in batches of BATCH by CLIENTS concurrent clients.
async function submit(queues, n) {
  let left = n;
  await Promise.all(
    queues.map(async (queue) => {
      while (left > 0) {
        const size = Math.min(BATCH, left);
        left -= size;
        await queue.addBulk(Array.from({ length: size }, () => ({ name: 'task', data: {} })));
      }
    }),
  );
}

async function round(child, queues, n) {
  child.send({ expect: n });
  const finished = next(child, 'finished');
  const start = Date.now();
  await submit(queues, n);
  const submitted = Date.now();
  const end = await finished;
  return { seconds: (end - start) / 1000, submitting: (submitted - start) / 1000 };
}

async function main(opts) {
  const connection = { host: '127.0.0.1', port: opts.port };
  const child = fork(new URL(import.meta.url).pathname, [
    '--role', 'worker', '--port', String(opts.port), '--concurrency', String(opts.concurrency),
  ]);
  await next(child, 'ready');
  const queues = Array.from({ length: CLIENTS }, () => new Queue(QUEUE, { connection }));
  await round(child, queues, opts.warmup);
  const measured = await round(child, queues, opts.jobs);
  child.send({ stop: true });
  await Promise.all(queues.map((q) => q.close()));
  console.log(JSON.stringify({
    jobs: opts.jobs,
    concurrency: opts.concurrency,
    seconds: measured.seconds,
    submitting_seconds: measured.submitting,
    jobs_per_second: opts.jobs / measured.seconds,
  }));
}

const opts = options(process.argv);
(opts.role === 'worker' ? work(opts) : main(opts)).catch((e) => {
  console.error(`error: ${e.stack ?? e}`);
  process.exit(1);
});
