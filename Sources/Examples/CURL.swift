import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LoopbackServer
import URLTaskManager

extension Scenario {
    static let curl = Scenario(
        name: "curl",
        summary: "Each request as a curl command line in the events, token and api_key redacted; revealing its secrets, a shell replays it"
    ) { transcript in
        let server = try LoopbackServer()
        defer { server.shutdown() }
        server.route("POST", "/orders") { request in .text("created \(request.bodyText)") }

        // DocC curl-interceptor: begin
        let manager = URLTaskManager(interceptors: [
            HeaderInterceptor(["Authorization": "Bearer s3cr3t-token"], origins: .only([server.url("/")])),  // this API's token
            CURLDescriptionInterceptor(options: .init(redactingQueryItems: ["tenant_ref"])),  // last: it sees what the others left
        ])
        let events = manager.events()  // subscribe before the first request
        let commands = Task {
            var commands: [String] = []
            for await event in events {
                if case .annotated("curl", let command) = event.kind { commands.append(command) }
            }
            return commands
        }
        // DocC curl-interceptor: end

        // DocC curl-request: begin
        var request = URLRequest(url: server.url("/orders?api_key=s3cr3t-key&tenant_ref=s3cr3t-tenant"))
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"item":"tea","note":"it's hot"}"#.utf8)
        let command = CURLDescription(request, options: .init(redactingQueryItems: ["tenant_ref"])).command
        // DocC curl-request: end
        transcript.client("before sending: \(command)")

        let (data, _) = try await manager.session.data(for: request)
        manager.finishTasksAndInvalidate()  // ends the event stream once the task is done
        let logged = await commands.value
        transcript.client("POST /orders → \(String(decoding: data, as: UTF8.self))")
        for command in logged { transcript.note(command) }

        try transcript.check(logged.count == 1, "expected one command, got \(logged.count)")
        let sent = logged[0]
        try transcript.check(sent.contains("'Authorization: Bearer REDACTED'"), "the token is not redacted")
        try transcript.check(!command.contains("Authorization"), "before sending, the request had no Authorization yet")
        try transcript.check(sent.contains("api_key=REDACTED"), "the api_key is not redacted")
        try transcript.check(sent.contains("tenant_ref=REDACTED"), "the name added to the options is not redacted")
        try transcript.check(!sent.contains("s3cr3t") && !command.contains("s3cr3t"), "a secret reached the command")

        // A redacted command sends `Bearer REDACTED`: to replay the request, a manager for your own
        // machine renders it with its secrets, asked for by name.
        // DocC curl-replay: begin
        let replaying = URLTaskManager(interceptors: [
            HeaderInterceptor(["Authorization": "Bearer s3cr3t-token"], origins: .only([server.url("/")])),
            CURLDescriptionInterceptor(options: .revealingSecrets),  // every secret as sent: for your terminal, never a shared log
        ])
        // DocC curl-replay: end
        let replayEvents = replaying.events()
        let replayCommands = Task {
            var commands: [String] = []
            for await event in replayEvents {
                if case .annotated("curl", let command) = event.kind { commands.append(command) }
            }
            return commands
        }
        _ = try await replaying.session.data(for: request)
        replaying.finishTasksAndInvalidate()
        let revealing = await replayCommands.value
        try transcript.check(revealing.count == 1, "expected one revealing command, got \(revealing.count)")
        try transcript.check(
            revealing[0].contains("'Authorization: Bearer s3cr3t-token'") && revealing[0].contains("api_key=s3cr3t-key"),
            "the revealing command does not show the secrets as sent")
        let sentByManager = server.requests(path: "/orders").last

        // The command is a shell command: run as it is, it sends what the manager sent.
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") else {
            transcript.conclude("1 command, secrets redacted; 1 revealing command (no curl here to replay it: apt-get install curl)")
            return
        }
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", revealing[0] + " --silent --noproxy '*' --max-time 20 --output /dev/null"]
        try shell.run()
        shell.waitUntilExit()
        let replayed = server.requests(path: "/orders").last
        let sameAuthorization = replayed?.headers["Authorization"] == sentByManager?.headers["Authorization"]
        transcript.server(
            "replayed by sh + curl: \(replayed?.method ?? "-") \(Redaction(addingNames: ["tenant_ref"]).text(replayed?.target ?? "-")), "
                + "\(sameAuthorization ? "the manager's" : "another") Authorization, body \(replayed?.bodyText ?? "-")")
        try transcript.check(
            shell.terminationStatus == 0 && server.requests(path: "/orders").count == 3 && replayed?.method == sentByManager?.method
                && replayed?.target == sentByManager?.target && replayed?.body == sentByManager?.body
                && replayed?.headers["Authorization"] == "Bearer s3cr3t-token" && sameAuthorization,
            "the replayed command did not send what the manager sent")
        transcript.conclude("1 command, secrets redacted; the revealing one, run by sh + curl, sent the manager's token, query and body")
    }
}
