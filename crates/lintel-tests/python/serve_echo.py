"""A service nobody here wrote the runtime of: pycapnp serves a link's
offer (`Link`) with doors `echo` (its data back), `fault` (fails with the
handler's fault code 42) and `call-back` (calls the door passed with the
call, with the call's data, and answers its answer). Usage:
serve_echo.py SCHEMA; prints `listening PORT`, then serves until killed."""
import asyncio
import sys

import capnp

schema = capnp.load(sys.argv[1])


class Echo(schema.Door.Server):
    async def call(self, data, doors, buffers, timeoutNs, _context, **kwargs):
        _context.results.outcome.init("reply").data = bytes(data)


class Fault(schema.Door.Server):
    async def call(self, data, doors, buffers, timeoutNs, _context, **kwargs):
        f = _context.results.outcome.init("failure")
        f.kind = "fault"
        f.code = 42


class CallBack(schema.Door.Server):
    async def call(self, data, doors, buffers, timeoutNs, _context, **kwargs):
        r = await doors[0].call(data=bytes(data), doors=[], buffers=[], timeoutNs=0)
        _context.results.outcome.init("reply").data = bytes(r.outcome.reply.data)


class Offer(schema.Link.Server):
    doors = {"echo": Echo, "fault": Fault, "call-back": CallBack}

    async def lookup(self, name, _context, **kwargs):
        if name not in self.doors:
            raise KeyError(name)
        _context.results.door = self.doors[name]()

    async def names(self, _context, **kwargs):
        _context.results.names = sorted(self.doors)

    async def ping(self, **kwargs):
        pass


async def connected(stream):
    await capnp.TwoPartyServer(stream, bootstrap=Offer()).on_disconnect()


async def main():
    server = await capnp.AsyncIoStream.create_server(connected, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"listening {port}", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(capnp.run(main()))
