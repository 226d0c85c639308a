/** The baseline for `npm run bench -- serve`: a bare node:http server answering an in-memory counter. */
import http from 'node:http';

let c = 0n;
const server = http.createServer((_req, res) => {
  const body = String(++c);
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length });
  res.end(body);
});
server.listen(0, '127.0.0.1', () => {
  const a = server.address() as { port: number };
  process.stdout.write(`http://127.0.0.1:${a.port}\n`);
});
process.once('SIGTERM', () => server.close(() => process.exit(0)));
