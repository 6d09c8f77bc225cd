#!/usr/bin/env python3
"""A fake desktop notification server for the console's E2E test (tests/e2e.rs).

  fake_notifications.py serve LOG     owns org.freedesktop.Notifications on the session bus,
                                      appends each notification to LOG (one JSON object a
                                      line: id, app_name, summary, body, actions) and prints
                                      "ready" once the name is taken
  fake_notifications.py invoke ID KEY a click: asks the server to emit ActionInvoked(ID, KEY)
                                      and, a moment later, NotificationClosed(ID, 2)

Debian 12: apt-get install python3-dbus python3-gi dbus-daemon (scripts/install-console-deps.sh).
"""
import json
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

NAME = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
CONTROL = "org.leadgate.FakeNotifications"


class Server(dbus.service.Object):
    def __init__(self, bus, log):
        self.log = log
        self.last_id = 0
        self.bus_name = dbus.service.BusName(NAME, bus, do_not_queue=True)
        super().__init__(self.bus_name, PATH)

    @dbus.service.method(NAME, in_signature="susssasa{sv}i", out_signature="u")
    def Notify(self, app_name, replaces_id, app_icon, summary, body, actions, hints, timeout):
        if replaces_id:
            nid = int(replaces_id)
        else:
            self.last_id += 1
            nid = self.last_id
        record = {
            "id": nid,
            "app_name": str(app_name),
            "summary": str(summary),
            "body": str(body),
            "actions": [str(a) for a in actions],
        }
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return dbus.UInt32(nid)

    @dbus.service.method(NAME, out_signature="as")
    def GetCapabilities(self):
        return ["actions", "body"]

    @dbus.service.method(NAME, in_signature="u")
    def CloseNotification(self, nid):
        self.NotificationClosed(nid, dbus.UInt32(3))

    @dbus.service.method(NAME, out_signature="ssss")
    def GetServerInformation(self):
        return ("leadgate-fake-notifications", "leadgate", "1.0", "1.2")

    @dbus.service.signal(NAME, signature="us")
    def ActionInvoked(self, nid, key):
        pass

    @dbus.service.signal(NAME, signature="uu")
    def NotificationClosed(self, nid, reason):
        pass

    @dbus.service.method(CONTROL, in_signature="us")
    def Invoke(self, nid, key):
        nid = dbus.UInt32(nid)
        self.ActionInvoked(nid, key)
        # As a real server does after a click: the notification goes (reason 2, dismissed).
        GLib.timeout_add(300, lambda: self.NotificationClosed(nid, dbus.UInt32(2)) and False)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "serve" and len(sys.argv) == 3:
        dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
        bus = dbus.SessionBus()
        server = Server(bus, sys.argv[2])
        print("ready", flush=True)
        GLib.MainLoop().run()
        del server
    elif mode == "invoke" and len(sys.argv) == 4:
        bus = dbus.SessionBus()
        control = dbus.Interface(bus.get_object(NAME, PATH), CONTROL)
        control.Invoke(dbus.UInt32(int(sys.argv[2])), sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
