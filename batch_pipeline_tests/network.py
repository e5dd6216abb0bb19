"""A TCP proxy the tests can stall: connections stay open and nothing is forwarded, as when a
network partition or a stalled pooler sits between a client and its server. No timeout on
either side can see it; only the client's own deadline can."""

import select
import socket
import threading


class StallingProxy:
    """Forwards 127.0.0.1:<port> to (host, port) until `stall()`; `resume()` forwards again."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.stalled = threading.Event()
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self.stalled.set()

    def resume(self) -> None:
        self.stalled.clear()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while not self.closed.is_set():
            if self.stalled.is_set():  # hold the bytes where they are: the sender sees no error
                self.closed.wait(0.05)
                continue
            try:
                readable, _, _ = select.select([source], [], [], 0.05)
                if not readable:
                    continue
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            except OSError:
                break
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed.set()
        for sock in self.sockets:
            sock.close()

    def __enter__(self) -> "StallingProxy":
        return self

    def __exit__(self, *_) -> None:
        self.close()
