// Starts server-everything (its path is the first argument) over Streamable HTTP on a
// port the system picks, and prints `PORT <n>` on stdout once it listens: the server
// itself reads a fixed PORT and only logs the one it was given.
import http from "node:http";

const entry = process.argv[2];
const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (...args) {
  this.once("listening", () => {
    process.stdout.write(`PORT ${this.address().port}\n`);
  });
  return listen.apply(this, args);
};
process.env.PORT = "0";
// The server's own log lines go to stderr: stdout carries only the port.
console.log = (...args) => console.error(...args);
process.argv = [process.argv[0], entry, "streamableHttp"];
await import(entry);
