#!/usr/bin/env python3
"""Writes the seed corpus of the frame-parser fuzz target (tests/fuzz/corpus/frame/).
Frames follow the layout documented in src/core/store/tcp_protocol.hpp."""
import os, struct, sys

def frame(op, keys=(), values=(), num=0, fid=1, version=1):
    body = struct.pack('<I', len(keys)) + b''.join(struct.pack('<I', len(k)) + k for k in keys)
    body += struct.pack('<I', len(values)) + b''.join(struct.pack('<I', len(v)) + v for v in values)
    body += struct.pack('<q', num)
    return struct.pack('<IBBHII', 0x4D4D5953, version, op, 0, len(body), fid) + body

seeds = {
    'hello': frame(1, values=[b'token']),
    'set': frame(2, keys=[b'a/b/0'], values=[b'\x00\x01value']),
    'get': frame(3, keys=[b'a/b/0'], num=1000),
    'wait': frame(4, keys=[b'k1', b'k2', b'k3'], num=5),
    'add': frame(5, keys=[b'ctr'], num=-3),
    'compare_set': frame(6, keys=[b'cs'], values=[b'', b'x']),
    'multi_get': frame(7, keys=[b'x', b'y'], num=0),
    'multi_set': frame(8, keys=[b'x', b'y'], values=[b'1', b'22']),
    'remove': frame(9, keys=[b'x']),
    'check': frame(10, keys=[b'x', b'y']),
    'num_keys': frame(11),
    'set_on_disconnect': frame(12, keys=[b'p/dead/3'], values=[b'3']),
    'cancel_on_disconnect': frame(13, keys=[b'p/dead/3']),
    'reply_ok': frame(0x80, values=[b'v1', b'v2'], num=7),
    'reply_timeout': frame(0x81, keys=[b'missing']),
    'reply_error': frame(0x82, values=[b'message'], num=1),
    'two_frames': frame(2, keys=[b'k'], values=[b'v']) + frame(3, keys=[b'k'], num=1),
}
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus', 'frame')
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
