// The JSON lines of the Code Interpreter server's POST /execute, for its tests.

export type Line = { type: string; [k: string]: unknown };

/** An execution's lines as they arrive. */
export async function* lines(res: Response): AsyncGenerator<Line> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of res.body!) {
    buf += decoder.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      yield JSON.parse(buf.slice(0, i)) as Line;
      buf = buf.slice(i + 1);
    }
  }
}

/** All of one stream's text in an execution's lines. */
export const text = (ls: Line[], type: "stdout" | "stderr") => ls.filter((l) => l.type === type).map((l) => l.text).join("");
