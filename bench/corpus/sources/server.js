// A config loader that crashes on a missing section (for the benchmark).
const defaults = { http: { host: "127.0.0.1", port: 8080 }, db: { url: "sqlite://app.db" } };

function merge(base, extra) {
  const out = { ...base };
  for (const [k, v] of Object.entries(extra)) out[k] = v;
  return out;
}

function listenAddress(cfg) {
  return `${cfg.server.host}:${cfg.server.port}`;
}

function start(userConfig) {
  const cfg = merge(defaults, userConfig);
  console.log("starting with", JSON.stringify(cfg));
  return listenAddress(cfg);
}

start({ db: { url: "postgres://db/app" } });
