/*
 * The page the client runs in: the #chat-app root, the addresses it names in data-*, and the
 * elements the modules work with (looked up once; module scripts run after the document parsed).
 */
import { byId } from "../lib/dom.js";

export const root = document.getElementById("chat-app");
const data = root ? root.dataset : {};

export const API = data.apiRoot || "/api/v1/";
export const WS_PATH = data.wsPath || "/ws/sessions/";
export const LOGIN_URL = data.loginUrl || "/accounts/login/";

// Elements
export const ui = {
  botSelect: byId("bot-select"),
  botInfo: byId("bot-info"),
  newSession: byId("new-session"),
  sessionList: byId("session-list"),
  sessionEmpty: byId("session-empty"),
  newBotPanel: byId("new-bot-panel"),
  newBotForm: byId("new-bot-form"),
  newBotError: byId("new-bot-error"),
  newBotSubmit: byId("new-bot-submit"),
  title: byId("conversation-title"),
  connection: byId("connection-status"),
  compaction: byId("compaction-status"),
  gauge: byId("context-gauge"),
  gaugeBar: byId("gauge-bar"),
  gaugeLegend: byId("gauge-legend"),
  gaugeTotal: byId("gauge-total"),
  sidebar: byId("sidebar"),
  drawerToggle: byId("drawer-toggle"),
  drawerClose: byId("drawer-close"),
  drawerBackdrop: byId("drawer-backdrop"),
  sessionSearch: byId("session-search"),
  sessionNoMatch: byId("session-nomatch"),
  rename: byId("rename-session"),
  renameForm: byId("rename-form"),
  renameInput: byId("rename-input"),
  renameCancel: byId("rename-cancel"),
  commandHint: byId("command-hint"),
  banner: byId("error-banner"),
  bannerText: byId("error-banner-text"),
  bannerDismiss: byId("error-banner-dismiss"),
  transcript: byId("transcript"),
  transcriptEmpty: byId("transcript-empty"),
  composerForm: byId("composer-form"),
  composer: byId("composer"),
  composerNote: byId("composer-note"),
  send: byId("send"),
  stop: byId("stop"),
};
