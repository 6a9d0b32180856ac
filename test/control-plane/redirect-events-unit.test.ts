// The conntrack events that tell the egress proxy where a redirected
// connection was going (original-destination.ts), fed lines in the format
// `conntrack -E` prints. A key (sandbox address, source port) names one
// connection only while it lives: nothing kept for an earlier connection may
// answer for a later one with the same address and port.
import { describe, expect, it } from "vitest";
import { RedirectEvents } from "../../control-plane/runtimes/net/egress-proxy/original-destination.js";

const line = (src: string, sport: number, dst: string, dport: number) =>
  `    [NEW] tcp      6 120 SYN_SENT src=${src} dst=${dst} sport=${sport} dport=${dport} [UNREPLIED] src=10.201.0.1 dst=${src} sport=15001 dport=${sport}`;

describe("redirect events", () => {
  it("an event that came before the connection was accepted answers it, once", async () => {
    const r = new RedirectEvents();
    r.follow("10.200.0.2", true);
    r.line(line("10.200.0.2", 40000, "93.184.216.34", 443));
    expect(await r.take("10.200.0.2:40000", 5)).toEqual({ address: "93.184.216.34", port: 443 });
    expect(await r.take("10.200.0.2:40000", 5)).toBeUndefined();
  });

  it("an event that comes while the connection waits answers it", async () => {
    const r = new RedirectEvents();
    r.follow("10.200.0.2", true);
    const asked = r.take("10.200.0.2:40001", 5_000);
    r.line(line("10.200.0.2", 40001, "1.2.3.4", 80));
    expect(await asked).toEqual({ address: "1.2.3.4", port: 80 });
  });

  it("an event that comes after its connection stopped waiting is dropped: a later connection from the same port gets its own", async () => {
    const r = new RedirectEvents();
    r.follow("10.200.0.2", true);
    expect(await r.take("10.200.0.2:40002", 5)).toBeUndefined(); // its event was late: the table answered
    r.line(line("10.200.0.2", 40002, "5.5.5.5", 443)); // ... and here it is
    // The next connection from that port, accepted before its own event came: it waits for that event.
    const next = r.take("10.200.0.2:40002", 5_000);
    r.line(line("10.200.0.2", 40002, "6.6.6.6", 443));
    expect(await next).toEqual({ address: "6.6.6.6", port: 443 });
  });

  it("an event nobody asked for expires; a sandbox's events go with it; other addresses are not kept", async () => {
    const r = new RedirectEvents();
    r.follow("10.200.0.2", true);
    const t = Date.now();
    r.line(line("10.200.0.2", 40003, "7.7.7.7", 443), t - 60_000);
    expect(await r.take("10.200.0.2:40003", 5, t)).toBeUndefined();
    r.line(line("10.200.0.2", 40004, "8.8.8.8", 443));
    r.follow("10.200.0.2", false);
    r.follow("10.200.0.2", true); // the address given to the next sandbox
    expect(await r.take("10.200.0.2:40004", 5)).toBeUndefined();
    r.line(line("10.200.0.9", 40005, "9.9.9.9", 443));
    expect(await r.take("10.200.0.9:40005", 5)).toBeUndefined();
  });
});
