// Preloaded (`node --require`) into a child process that plays a client on a
// machine with wildcard DNS: every name under $LOCALE2B_TEST_DNS_DOMAIN
// (`*.sandbox.test`, as an operator's `*.example.com A <server>` record)
// resolves to 127.0.0.1; any other name goes to the system resolver. This
// host has no such record and tests may not edit /etc/hosts or the resolver.
const dns = require("node:dns");

const domain = (process.env.LOCALE2B_TEST_DNS_DOMAIN || "").toLowerCase();
const original = dns.lookup;

function covered(host) {
  const h = String(host).toLowerCase();
  return domain !== "" && (h === domain || h.endsWith(`.${domain}`));
}

dns.lookup = function lookup(host, options, callback) {
  if (typeof options === "function") [callback, options] = [options, {}];
  if (!covered(host)) return original.call(dns, host, options, callback);
  const opts = typeof options === "number" ? { family: options } : options || {};
  if (opts.family === 6) return process.nextTick(callback, Object.assign(new Error(`no AAAA record for ${host}`), { code: "ENOTFOUND" }));
  if (opts.all) return process.nextTick(callback, null, [{ address: "127.0.0.1", family: 4 }]);
  return process.nextTick(callback, null, "127.0.0.1", 4);
};
