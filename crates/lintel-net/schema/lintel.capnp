# Doors across machines: what two lintel proxies (or any Cap'n Proto peer)
# say to each other. A lintel door is a `Door` capability; a call carries
# bytes, doors and buffers, and the time left before its deadline; a reply
# is bytes, doors and buffers, or the error the call met, typed as lintel's
# own. Releasing a `Door` is a holder letting go of it; a lost connection
# is the far domain's death; cancelling a call (Finish) alerts its server.
@0x81f3749f59642608;

interface Door {
  # Call the door. `timeoutNs` is the time left before the caller's
  # deadline (0: none); `buffers` are bulk data passed by reference on the
  # caller's side, carried as bytes here.
  call @0 (data :Data, doors :List(Door), buffers :List(Data), timeoutNs :UInt64)
       -> (outcome :Outcome);
}

struct Outcome {
  union {
    reply @0 :Reply;
    failure @1 :Failure;
  }
}

struct Reply {
  data @0 :Data;
  doors @1 :List(Door);
  buffers @2 :List(Data);
}

# Why a call failed, as lintel's `CallError` says it.
struct Failure {
  kind @0 :Kind;
  # The handler's fault code (kind `fault`).
  code @1 :UInt32;
  # A word for the log; never parsed.
  message @2 :Text;

  enum Kind {
    fault @0;
    peerDied @1;
    revoked @2;
    timedOut @3;
    cancelled @4;
    badDoor @5;
    panicked @6;
    tooLarge @7;
    tooManyDoors @8;
    badMessage @9;
    local @10;
    # The door's server was gone before the call came: nothing ran, so
    # the caller may try the service's new instance (a lintel caller sees
    # `peerDied`).
    gone @11;
  }
}

# What each end of a link offers the other first (its bootstrap).
interface Link {
  # The door exported under `name`; fails if none is.
  lookup @0 (name :Text) -> (door :Door);
  # The names exported.
  names @1 () -> (names :List(Text));
  # Answered at once: the keepalive.
  ping @2 () -> ();
}
