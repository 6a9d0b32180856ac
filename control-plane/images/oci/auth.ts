// The three credential forms E2B's Template SDK sends in `fromImageRegistry`,
// checked and turned into the user and password a registry takes:
//   {type: "registry", username, password}
//   {type: "aws", awsAccessKeyId, awsSecretAccessKey, awsRegion}  → ECR's token (ecr.ts)
//   {type: "gcp", serviceAccountJson}                             → `_json_key` + the JSON, as GCR and Artifact Registry take
import { ecrCredentials } from "./ecr.js";
import { ImagePullError } from "./errors.js";

export type RegistryAuth =
  | { type: "registry"; username: string; password: string }
  | { type: "aws"; awsAccessKeyId: string; awsSecretAccessKey: string; awsRegion: string }
  | { type: "gcp"; serviceAccountJson: string };

export interface Credentials {
  username: string;
  password: string;
}

function field(auth: Record<string, unknown>, name: string): string {
  const v = auth[name];
  if (typeof v !== "string" || v === "") throw new ImagePullError("invalid", `fromImageRegistry (type ${String(auth.type)}) needs ${name}: a non-empty string`);
  return v;
}

/** The user and password for the image's registry, or undefined without `auth`. AWS keys cost one ECR request. */
export async function registryCredentials(auth: unknown, ecrEndpoint: string, signal?: AbortSignal): Promise<Credentials | undefined> {
  if (auth === undefined || auth === null) return undefined;
  if (typeof auth !== "object" || Array.isArray(auth)) throw new ImagePullError("invalid", "fromImageRegistry must be an object with type registry, aws or gcp");
  const a = auth as Record<string, unknown>;
  switch (a.type) {
    case "registry": {
      const username = field(a, "username");
      if (username.includes(":")) throw new ImagePullError("invalid", "fromImageRegistry username cannot contain ':'");
      return { username, password: field(a, "password") };
    }
    case "aws":
      return ecrCredentials({ accessKeyId: field(a, "awsAccessKeyId"), secretAccessKey: field(a, "awsSecretAccessKey"), region: field(a, "awsRegion") }, ecrEndpoint, signal);
    case "gcp": {
      const json = field(a, "serviceAccountJson");
      try {
        if (typeof JSON.parse(json) !== "object") throw new Error("not an object");
      } catch {
        throw new ImagePullError("invalid", "fromImageRegistry serviceAccountJson is not a JSON object (the service account's key file, as downloaded)");
      }
      return { username: "_json_key", password: json };
    }
    default:
      throw new ImagePullError("invalid", `fromImageRegistry type ${JSON.stringify(a.type)} is not one of registry, aws, gcp`);
  }
}
