import Foundation

/// Everything the server's threads share. Kept separate from `LoopbackServer` so those threads do
/// not keep the public object alive: dropping the last `LoopbackServer` reference shuts everything down.
final class ServerCore: Sendable {
    let configuration: LoopbackServer.Configuration
    let port: Int
    let routes = RouteTable()
    let log = RequestLog()
    let registry = ConnectionRegistry()
    private let listener: Int32
    private let wake: (reader: Int32, writer: Int32)
    private let acceptLoopDone = Gate()
    private let shutdownDone = Gate()

    /// Binds 127.0.0.1:0, listens, and starts the accept thread.
    init(configuration: LoopbackServer.Configuration) throws {
        self.configuration = configuration
        let (fd, port) = try Socket.listenOnLoopback(backlog: Int32(clamping: configuration.listenBacklog), port: configuration.port)
        do {
            wake = try Socket.makeWakePair()
        } catch {
            Socket.closeDescriptor(fd)
            throw error
        }
        listener = fd
        self.port = port
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "LoopbackServer.accept.\(port)"
        thread.start()
    }

    /// Stops accepting, shuts down every connection, fails pending waiters, and waits (boundedly) for
    /// connection threads; threads parked in handlers are not waited for, their sockets are already dead.
    func shutdown() {
        guard registry.stop() else {
            shutdownDone.wait(timeout: .seconds(10))
            return
        }
        var wakeByte: UInt8 = 1
        try? withUnsafeBytes(of: &wakeByte) { try Socket.sendAll(wake.writer, $0) }
        acceptLoopDone.wait(timeout: .seconds(10))
        log.stop()
        registry.waitUntilIdle(excluding: Connection.currentID(on: self), deadline: Date(timeIntervalSinceNow: 5))
        Socket.closeDescriptor(wake.reader)
        Socket.closeDescriptor(wake.writer)
        shutdownDone.open()
    }

    private func acceptLoop() {
        defer {
            Socket.closeDescriptor(listener)
            acceptLoopDone.open()
        }
        while true {
            let ready = Socket.waitReadable([listener, wake.reader])
            if ready[1] || registry.isStopped { return }
            guard ready[0] else { continue }
            switch Socket.acceptConnection(listener) {
            case .accepted(let fd):
                guard let id = registry.register(fd: fd) else { return }
                Connection.start(id: id, fd: fd, core: self)
            case .retry:
                continue
            case .outOfDescriptors:
                // Back off briefly instead of spinning while the process is out of descriptors.
                if !registry.sleep(for: .milliseconds(10)) { return }
            case .failed:
                return
            }
        }
    }
}
