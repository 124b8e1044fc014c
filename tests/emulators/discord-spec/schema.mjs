// Prints, as JSON Schema, the request bodies the hermes Discord adapter sends,
// converted from discord-api-spec's schemas (generated from Discord's own
// OpenAPI description). `io: "output"` makes every object closed
// (additionalProperties: false), so a misspelt field is caught too.
// Usage: node schema.mjs
//   → {"create_message": {...}, "edit_message": {...}, "interaction_message": {...},
//      "interaction_update": {...}}
import { toJSONSchema } from "zod/v4/core";
import {
  MessageCreateRequestSchema,
  MessageEditRequestPartialSchema,
  CreateMessageInteractionCallbackRequestSchema,
  UpdateMessageInteractionCallbackRequestSchema,
} from "discord-api-spec/zod";

const convert = (schema) => toJSONSchema(schema, { io: "output", unrepresentable: "any" });
process.stdout.write(
  JSON.stringify({
    create_message: convert(MessageCreateRequestSchema),
    // PATCH /channels/{id}/messages/{id} (a closed question's buttons).
    edit_message: convert(MessageEditRequestPartialSchema),
    // Interaction callback type 4 (CHANNEL_MESSAGE_WITH_SOURCE).
    interaction_message: convert(CreateMessageInteractionCallbackRequestSchema),
    // Interaction callback type 7 (UPDATE_MESSAGE).
    interaction_update: convert(UpdateMessageInteractionCallbackRequestSchema),
  }),
);
