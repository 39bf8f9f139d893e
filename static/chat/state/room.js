/*
 * The open chat's room as this page holds it (docs/rooms.md): its participants, who answers, and
 * which bot's seat the gauge shows; the questions other modules ask of it. Read and changed by
 * controllers/participants.js, which owns the participants bar.
 */
import { sameId } from "../lib/format.js";

// The open chat's room: null until read (a chat that was never a room reads as one participant).
export const room = { sessionId: null, replyMode: "mentioned", participants: [], gaugeBotId: null, ready: null };

// The bots that take part now (removed ones keep their messages but answer no more).
export function activeParticipants() {
  return room.participants.filter(function (p) {
    return !p.removed_at;
  });
}

export function isRoom() {
  return activeParticipants().length > 1;
}

export function defaultParticipant() {
  return activeParticipants().find(function (p) {
    return p.is_default;
  });
}

// ?bot= for the reports read from one bot's seat: the gauge's bot, once the user picked one.
export function gaugeBotQuery() {
  return room.gaugeBotId === null ? "" : "?bot=" + encodeURIComponent(room.gaugeBotId);
}

// Whether a context report (a context.updated frame, whose `bot` names the seat in a room) is
// the one the gauge shows: a frame naming a bot must name the picked one (or the default when
// none was picked); one naming none is the default bot's.
export function gaugeShows(ref) {
  var bot = ref !== undefined && ref !== null ? ref : null;
  if (bot === null) return room.gaugeBotId === null;
  var want = room.gaugeBotId !== null ? room.gaugeBotId : defaultId();
  return want === null || sameBot(bot, want);
}

function defaultId() {
  var d = defaultParticipant();
  return d ? d.bot.id : null;
}

function sameBot(bot, id) {
  return sameId(bot && typeof bot === "object" ? bot.id : bot, id);
}

// The bots whose summaries and events the markers read: every participant, removed ones too.
export function roomBotIds() {
  return room.participants.map(function (p) {
    return p.bot.id;
  });
}

// The participant a summary or event belongs to ({id, slug, name}), when it says.
export function participantBot(ref) {
  if (ref === null || ref === undefined) return null;
  var id = typeof ref === "object" ? ref.id : ref;
  var found = room.participants.find(function (p) {
    return sameId(p.bot.id, id);
  });
  return found ? found.bot : typeof ref === "object" ? ref : null;
}

// Resolves once the open chat's participants were read (or failed to be).
export function roomReady() {
  return room.ready || Promise.resolve();
}
