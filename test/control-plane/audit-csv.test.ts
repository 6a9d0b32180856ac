import { describe, expect, it } from "vitest";
import { AUDIT_CSV_HEADER, auditCsvRow } from "../../control-plane/audit/audit-csv.js";

describe("the audit log as CSV", () => {
  it("quotes commas, quotes and line breaks, writes details as JSON, and defuses spreadsheet formulas", () => {
    expect(AUDIT_CSV_HEADER.trimEnd().split(",")).toHaveLength(11);
    const row = auditCsvRow({
      id: 7,
      time: "2026-11-27T18:00:00.000Z",
      actor: "key_0123456789ab",
      api: "workspace",
      action: "POST /sandboxes/:id/exec",
      sandbox_id: "abc",
      result: "error",
      status: 400,
      message: 'bad "input", twice\nsecond line',
      details: { command: "=HYPERLINK(\"http://evil\")" },
    });
    expect(row).toBe(
      '7,2026-11-27T18:00:00.000Z,key_0123456789ab,workspace,POST /sandboxes/:id/exec,abc,error,400,"bad ""input"", twice\nsecond line",,"{""command"":""=HYPERLINK(\\""http://evil\\"")""}"\r\n',
    );
    // A text cell that a spreadsheet would evaluate gets a leading apostrophe.
    const f = auditCsvRow({ id: 1, time: "t", actor: "envd-token", api: "envd", action: "=1+1", result: "ok", message: "@SUM(A1)" });
    expect(f).toBe("1,t,envd-token,envd,'=1+1,,ok,,'@SUM(A1),,\r\n");
  });
});
