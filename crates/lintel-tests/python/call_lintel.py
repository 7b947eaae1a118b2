"""A client nobody here wrote the runtime of: pycapnp calls the doors a
lintel proxy exports (the test host's control door), passes a door of its
own for the lintel side to call, and checks every answer. Usage:
call_lintel.py SCHEMA HOST PORT; prints one line per check, exits 0 if all
held."""
import asyncio
import sys

import capnp

schema = capnp.load(sys.argv[1])
host, port = sys.argv[2], int(sys.argv[3])

ECHO, MAKE_DOOR, HOLD, CALL_HELD = 0, 1, 3, 16


class Shout(schema.Door.Server):
    """A door served here, in Python: answers its data in capitals."""

    async def call(self, data, doors, buffers, timeoutNs, _context, **kwargs):
        _context.results.outcome.init("reply").data = bytes(data).upper()


async def call(door, data, doors=()):
    r = await door.call(data=data, doors=list(doors), buffers=[], timeoutNs=0)
    return r.outcome


def check(what, cond):
    print(("ok " if cond else "FAILED ") + what, flush=True)
    if not cond:
        sys.exit(1)


async def main():
    stream = await capnp.AsyncIoStream.create_connection(host=host, port=port)
    client = capnp.TwoPartyClient(stream)
    link = client.bootstrap().cast_as(schema.Link)
    names = (await link.names()).names
    check("names", list(names) == ["ctl", "local"])
    ctl = (await link.lookup("ctl")).door
    out = await call(ctl, bytes([ECHO]) + b"from python")
    check("echo", out.which() == "reply" and bytes(out.reply.data) == b"from python")
    big = bytes(range(256)) * 4096
    out = await call(ctl, bytes([ECHO]) + big)
    check("echo 1 MiB", out.which() == "reply" and bytes(out.reply.data) == big)
    out = await call(ctl, bytes([200]))
    check("an unknown method is the handler's fault", out.which() == "failure" and str(out.failure.kind) == "fault")
    out = await call(ctl, bytes([MAKE_DOOR]) + (5).to_bytes(8, "little"))
    check("a door returned", out.which() == "reply" and len(out.reply.doors) == 1)
    made = out.reply.doors[0]
    out = await call(made, bytes([ECHO]) + b"x")
    check("the returned door answers", out.which() == "reply")
    # A door of this process, held over there and called by the lintel side.
    shout = schema.Door._new_client(Shout())
    out = await call(ctl, bytes([HOLD]), [shout])
    check("a door passed", out.which() == "reply")
    out = await call(ctl, bytes([CALL_HELD]) + b"called back")
    check("the lintel side called it", out.which() == "reply" and bytes(out.reply.data) == b"CALLED BACK")
    try:
        await link.lookup("secret")
        check("no door named secret", False)
    except capnp.KjException:
        check("no door named secret", True)


asyncio.run(capnp.run(main()))
