package rmqstore.spark;

import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.List;
import java.util.regex.Pattern;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import rmqstore.jni.StoreIOException;

/**
 * Where write tasks stage their rows: {@code <store>/spark-staging/<job>/} (the Python writer's
 * convention, python/rmqstore/spark/write.py), one Arrow IPC file per task,
 * {@code <partition>-<uuid>.arrow}, written as {@code .arrow.tmp} and renamed once complete.
 *
 * <p>Staged files never leave the store folder: the driver creates the job's folder before the
 * tasks start, and refuses a {@code spark-staging} that is a symbolic link or not a folder; tasks
 * only create new files in that folder (never following a link), the driver opens only names of
 * the staged pattern, and removal never follows a link (a link found inside is removed itself).
 */
final class Staging {
  private Staging() {}

  static final String DIR = "spark-staging";
  private static final Pattern FILE = Pattern.compile("[0-9]{6,10}-[0-9a-f]{32}\\.arrow");
  private static final Pattern JOB = Pattern.compile("[0-9a-f]{32}");

  /** The staged rows' Arrow schema (rust/jni/src/staged.rs reads exactly this). */
  static final Schema SCHEMA = schema();

  private static Schema schema() {
    FieldType utf8 = FieldType.notNullable(ArrowType.Utf8.INSTANCE);
    Field entries =
        new Field(
            "entries",
            FieldType.notNullable(ArrowType.Struct.INSTANCE),
            List.of(new Field("key", utf8, null), new Field("value", utf8, null)));
    return new Schema(
        List.of(
            new Field("topic", utf8, null),
            new Field("body", FieldType.notNullable(ArrowType.Binary.INSTANCE), null),
            new Field("queue_id", FieldType.nullable(new ArrowType.Int(32, true)), null),
            new Field("tags", FieldType.nullable(ArrowType.Utf8.INSTANCE), null),
            new Field(
                "keys",
                FieldType.notNullable(ArrowType.List.INSTANCE),
                List.of(new Field("item", utf8, null))),
            new Field(
                "properties",
                FieldType.notNullable(new ArrowType.Map(false)),
                List.of(entries))));
  }

  private static StoreIOException failed(String what, Path where, Exception e) {
    return new StoreIOException(
        "rmqstore data source: cannot " + what + " " + where + ": " + e.getMessage());
  }

  private static Path staging(String store) throws IOException {
    return Path.of(store).toRealPath().resolve(DIR);
  }

  private static void checkFolder(Path dir) {
    if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
      throw new StoreIOException(
          "rmqstore data source: "
              + dir
              + " is a symbolic link or not a folder; write tasks stage their rows in that"
              + " folder, inside the store folder only: remove it and write again");
    }
  }

  /** Creates the job's staging folder (the driver, before the tasks start). */
  static void create(String store, String job) {
    Path dir = null;
    try {
      Files.createDirectories(Path.of(store));
      Path staging = staging(store);
      try {
        Files.createDirectory(staging);
      } catch (FileAlreadyExistsException e) {
        // Another job's, or left by a crashed one: checked below.
      }
      checkFolder(staging);
      dir = staging.resolve(job);
      Files.createDirectory(dir);
    } catch (IOException e) {
      throw failed("create the staging folder", dir == null ? Path.of(store, DIR) : dir, e);
    }
  }

  /** The job's staging folder, for a task: it must be there (a removed one: the job ended). */
  static Path jobFolder(String store, String job) {
    try {
      Path staging = staging(store);
      checkFolder(staging);
      Path dir = staging.resolve(job);
      if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
        throw new StoreIOException(
            "rmqstore data source: the staging folder "
                + dir
                + " is gone (the write job was aborted) or is not a folder");
      }
      return dir;
    } catch (IOException e) {
      throw failed("find the staging folder of", Path.of(store), e);
    }
  }

  /** A staged file named in a commit message, checked to be a name of the job's folder. */
  static Path stagedFile(String store, String job, String name) {
    if (!FILE.matcher(name).matches()) {
      throw new StoreIOException("rmqstore data source: " + name + " is not a staged file's name");
    }
    return jobFolder(store, job).resolve(name);
  }

  /**
   * Removes the job's staging folder, then {@code spark-staging} if no other job uses it;
   * quietly (what cannot be removed stays), never following a link.
   */
  static void remove(String store, String job) {
    if (!JOB.matcher(job).matches()) {
      return;
    }
    Path staging;
    try {
      staging = staging(store);
    } catch (IOException e) {
      return;
    }
    if (!Files.isDirectory(staging, LinkOption.NOFOLLOW_LINKS)) {
      return;
    }
    Path dir = staging.resolve(job);
    try {
      if (Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
        Files.walkFileTree(
            dir,
            new SimpleFileVisitor<>() {
              @Override
              public FileVisitResult visitFile(Path file, BasicFileAttributes attrs)
                  throws IOException {
                Files.deleteIfExists(file);
                return FileVisitResult.CONTINUE;
              }

              @Override
              public FileVisitResult visitFileFailed(Path file, IOException exc) {
                return FileVisitResult.CONTINUE;
              }

              @Override
              public FileVisitResult postVisitDirectory(Path d, IOException exc)
                  throws IOException {
                Files.deleteIfExists(d);
                return FileVisitResult.CONTINUE;
              }
            });
      } else {
        Files.deleteIfExists(dir);
      }
    } catch (IOException e) {
      // What stays is removed by a later look (abort's grace period) or never read.
    }
    try {
      Files.deleteIfExists(staging);
    } catch (IOException e) {
      // Another job's folder is there.
    }
  }

  /** Whether the job's staging folder (or anything under its name) is there. */
  static boolean exists(String store, String job) {
    try {
      return Files.exists(staging(store).resolve(job), LinkOption.NOFOLLOW_LINKS);
    } catch (IOException e) {
      return false;
    }
  }
}
