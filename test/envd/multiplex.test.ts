// The output multiplexer's hand-back of pooled buffers (Output.release): an
// item's release runs once, when every subscriber is done with it (it asked
// for the next item, or closed), and at once when nobody subscribes. Too
// early would let a pipe read over output still being sent; never would
// leak envd's read buffers.
import { describe, expect, it } from "vitest";
import { Multiplexer, type Sized } from "../../envd/process/handler/multiplex.js";

interface Item extends Sized {
  n: number;
}

function items(released: number[]) {
  return (n: number): Item => ({ n, size: 1, release: () => released.push(n) });
}

describe("Multiplexer: releasing pooled items", () => {
  const signal = new AbortController().signal;

  it("with no subscriber an item is released at once", () => {
    const released: number[] = [];
    const mux = new Multiplexer<Item>();
    expect(mux.publish(items(released)(1))).toBeUndefined();
    expect(released).toEqual([1]);
  });

  it("an item is released once every subscriber has asked for the next one or closed", async () => {
    const released: number[] = [];
    const item = items(released);
    const mux = new Multiplexer<Item>();
    const a = mux.subscribe();
    const b = mux.subscribe();
    mux.publish(item(1));
    mux.publish(item(2));
    expect(await a.next(1000, signal)).toMatchObject({ kind: "item", item: { n: 1 } });
    expect(await b.next(1000, signal)).toMatchObject({ kind: "item", item: { n: 1 } });
    expect(released).toEqual([]); // both still hold 1
    await a.next(1000, signal); // a is done with 1, holds 2
    expect(released).toEqual([]);
    await b.next(1000, signal); // b too: 1 goes back
    expect(released).toEqual([1]);
    a.close();
    expect(released).toEqual([1]);
    mux.publish(item(3)); // b alone now
    b.close(); // holds 2, 3 queued: both go back, once each
    expect(released.sort()).toEqual([1, 2, 3]);
    b.close();
    expect(released).toHaveLength(3);
  });

  it("the end of the stream releases the last item", async () => {
    const released: number[] = [];
    const mux = new Multiplexer<Item>();
    const s = mux.subscribe();
    mux.publish(items(released)(1));
    mux.close();
    expect((await s.next(1000, signal)).kind).toBe("item");
    expect((await s.next(1000, signal)).kind).toBe("end");
    expect(released).toEqual([1]);
  });
});
